// Package ociimage builds OCI images without a container engine: layers from files with fixed
// timestamps, owners and sorted entries, image configs, multi-architecture indexes, OCI
// layout archives (importable with `ctr images import`) and pushes to a registry.
//
// Everything here is reproducible: the same inputs give the same digests, byte for byte, as
// upstream's release images are rebuilt from a tag. Nothing in a layer records when or by whom
// it was built.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the modification time of every entry and the creation time of every image.
var Epoch = time.Unix(0, 0).UTC()

// Layer collects the entries of one filesystem layer. Paths are absolute in the image
// ("/usr/bin/x") or relative to its root; both name the same entry. Adding a path twice
// keeps the last one, as a later COPY would. Missing parent directories are added (0755,
// root). Owners default to root and can be set per entry.
type Layer struct {
	entries map[string]entry
	err     error
}

type entry struct {
	typ      byte
	mode     int64
	uid, gid int
	data     []byte // regular file content when given in memory
	src      string // host file to read the content from
	link     string // symlink target
}

// NewLayer returns an empty layer.
func NewLayer() *Layer { return &Layer{entries: map[string]entry{}} }

// Owner sets the owner of entries added by the option-taking methods.
type Owner struct{ UID, GID int }

func clean(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

func (l *Layer) add(p string, e entry) {
	name := clean(p)
	if name == "" {
		return // the root itself is implicit
	}
	l.entries[name] = e
}

func owner(o []Owner) (int, int) {
	if len(o) == 0 {
		return 0, 0
	}
	return o[0].UID, o[0].GID
}

// File adds a regular file with the given content and permission bits.
func (l *Layer) File(p string, mode fs.FileMode, data []byte, o ...Owner) *Layer {
	uid, gid := owner(o)
	l.add(p, entry{typ: tar.TypeReg, mode: int64(mode.Perm()), uid: uid, gid: gid, data: data})
	return l
}

// HostFile adds a regular file whose content is read from src on the host when the layer is
// built.
func (l *Layer) HostFile(p, src string, mode fs.FileMode, o ...Owner) *Layer {
	uid, gid := owner(o)
	l.add(p, entry{typ: tar.TypeReg, mode: int64(mode.Perm()), uid: uid, gid: gid, src: src})
	return l
}

// Dir adds a directory; mode may carry the sticky bit (as /tmp's 1777).
func (l *Layer) Dir(p string, mode fs.FileMode, o ...Owner) *Layer {
	uid, gid := owner(o)
	m := int64(mode.Perm())
	if mode&fs.ModeSticky != 0 {
		m |= 01000
	}
	l.add(p, entry{typ: tar.TypeDir, mode: m, uid: uid, gid: gid})
	return l
}

// Symlink adds a symbolic link to target.
func (l *Layer) Symlink(p, target string) *Layer {
	l.add(p, entry{typ: tar.TypeSymlink, mode: 0o777, link: target})
	return l
}

// Tree adds every file, directory and symlink under the host directory src at dst, owned by
// root. Permission bits are normalised, so that the host's umask and the extraction tool do
// not show in the digest: directories and executables 0755, other files 0644; setuid and
// setgid bits are dropped. keep, when not nil, selects the entries (by their image path,
// without the leading slash) to add; a directory left out is still created as the parent of
// a kept entry.
func (l *Layer) Tree(dst, src string, keep func(name string) bool) *Layer {
	err := filepath.WalkDir(src, func(hostPath string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, hostPath)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		name := clean(path.Join(dst, filepath.ToSlash(rel)))
		if keep != nil && !keep(name) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(hostPath)
			if err != nil {
				return err
			}
			l.Symlink(name, target)
		case info.IsDir():
			l.Dir(name, 0o755)
		case info.Mode().IsRegular():
			mode := fs.FileMode(0o644)
			if info.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			l.HostFile(name, hostPath, mode)
		default:
			// Device nodes, sockets and pipes have no place in an image layer.
		}
		return nil
	})
	if err != nil && l.err == nil {
		l.err = fmt.Errorf("layer tree %s: %w", src, err)
	}
	return l
}

// Len is the number of entries added (without implied parent directories).
func (l *Layer) Len() int { return len(l.entries) }

// names returns every entry's name, the implied parents included, in the order they are
// written: sorted bytewise, which puts a directory before its contents.
func (l *Layer) names() []string {
	all := map[string]bool{}
	for name := range l.entries {
		all[name] = true
		for dir := path.Dir(name); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if _, ok := l.entries[dir]; !ok {
				all[dir] = true
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WriteTar writes the layer as an uncompressed tar stream.
func (l *Layer) WriteTar(w io.Writer) error {
	if l.err != nil {
		return l.err
	}
	tw := tar.NewWriter(w)
	for _, name := range l.names() {
		e, ok := l.entries[name]
		if !ok {
			e = entry{typ: tar.TypeDir, mode: 0o755}
		}
		hdr := &tar.Header{
			Typeflag: e.typ,
			Name:     name,
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.gid,
			ModTime:  Epoch,
			Format:   tar.FormatPAX,
		}
		if err := writeEntry(tw, hdr, e); err != nil {
			return fmt.Errorf("layer entry %s: %w", name, err)
		}
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, hdr *tar.Header, e entry) error {
	var body io.Reader
	switch e.typ {
	case tar.TypeDir:
		hdr.Name += "/"
	case tar.TypeSymlink:
		hdr.Linkname = e.link
	case tar.TypeReg:
		if e.src == "" {
			hdr.Size = int64(len(e.data))
			body = bytes.NewReader(e.data)
			break
		}
		f, err := os.Open(e.src)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		hdr.Size = st.Size()
		body = f
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if body == nil {
		return nil
	}
	n, err := io.Copy(tw, body)
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("size changed while read")
	}
	return err
}

// Build returns the layer as an OCI layer (gzip), compressed once and held in memory.
// compress/gzip writes no time or name into its header, so the blob is reproducible too.
func (l *Layer) Build() (v1.Layer, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if err := l.WriteTar(zw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	blob := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
