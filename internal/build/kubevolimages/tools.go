package kubevolimages

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/kubevol/kubevol/internal/build/ociimage"
)

// ToolNames are the programs the driver and the node agent execute (internal/component/driver/backend
// and k8s.io/mount-utils' SafeFormatAndMount and ResizeFs): mount, umount, losetup, blkid,
// blockdev, findmnt and fsck (util-linux, mount), mkfs.ext*/e2fsck/resize2fs/dumpe2fs
// (e2fsprogs), mkfs.xfs/xfs_growfs/xfs_io/xfs_repair (xfsprogs).
var ToolNames = []string{
	"mount", "umount", "losetup", "blkid", "blockdev", "findmnt", "fsck",
	"mke2fs", "mkfs.ext2", "mkfs.ext3", "mkfs.ext4", "e2fsck", "fsck.ext2", "fsck.ext3", "fsck.ext4",
	"resize2fs", "dumpe2fs", "tune2fs",
	"mkfs.xfs", "xfs_growfs", "xfs_io", "xfs_repair",
}

// toolConfig are configuration files the tools read: mke2fs.conf picks the ext4 features
// (without it mke2fs falls back to its compiled-in, older defaults).
var toolConfig = []string{"etc/mke2fs.conf"}

var triplets = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}

// Tools returns a layer of the tools from root (the extracted Debian packages of hack/debs.sh)
// with exactly the shared objects their ELF headers name, found by reading the headers (which
// works for any architecture), and the dynamic loader. The layer uses Debian's merged /usr:
// /bin, /sbin, /lib and /lib64 are links into /usr, so the packages' paths all resolve.
func Tools(root string, p ociimage.Platform) (*ociimage.Layer, error) {
	triplet, ok := triplets[p.Architecture]
	if !ok {
		return nil, fmt.Errorf("tools: no Debian multiarch triplet known for %s", p)
	}
	t := &toolTree{root: root, layer: ociimage.NewLayer(), seen: map[string]bool{},
		libDirs: []string{"usr/lib/" + triplet, "usr/lib", "usr/lib64"}}
	for _, top := range []string{"bin", "sbin", "lib", "lib64"} {
		t.layer.Symlink(top, "usr/"+top)
	}
	for _, name := range ToolNames {
		found := false
		for _, dir := range []string{"usr/sbin", "usr/bin"} {
			if _, _, ok := t.lookup(dir + "/" + name); ok {
				if err := t.add(dir+"/"+name, 0); err != nil {
					return nil, err
				}
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("tools: %s is in none of the Debian packages under %s", name, root)
		}
	}
	for _, f := range toolConfig {
		if err := t.add(f, 0); err != nil {
			return nil, err
		}
	}
	return t.layer, nil
}

type toolTree struct {
	root    string
	layer   *ociimage.Layer
	seen    map[string]bool
	libDirs []string
}

// canon maps a path in the image to its merged-/usr form, without the leading slash.
func canon(p string) string {
	c := strings.TrimPrefix(path.Clean("/"+p), "/")
	for _, top := range []string{"bin/", "sbin/", "lib/", "lib64/"} {
		if strings.HasPrefix(c, top) {
			return "usr/" + c
		}
	}
	return c
}

// lookup finds a canonical path in the extracted packages, which still ship some files
// under /lib or /sbin.
func (t *toolTree) lookup(c string) (string, fs.FileInfo, bool) {
	cands := []string{c}
	for _, top := range []string{"usr/bin/", "usr/sbin/", "usr/lib/", "usr/lib64/"} {
		if strings.HasPrefix(c, top) {
			cands = append(cands, strings.TrimPrefix(c, "usr/"))
		}
	}
	for _, cand := range cands {
		host := filepath.Join(t.root, filepath.FromSlash(cand))
		if fi, err := os.Lstat(host); err == nil {
			return host, fi, true
		}
	}
	return "", nil, false
}

func (t *toolTree) add(p string, depth int) error {
	c := canon(p)
	if t.seen[c] {
		return nil
	}
	if depth > 40 {
		return fmt.Errorf("tools: %s: too many levels of links", p)
	}
	t.seen[c] = true
	host, fi, ok := t.lookup(c)
	if !ok {
		return fmt.Errorf("tools: /%s is in none of the Debian packages under %s", c, t.root)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(host)
		if err != nil {
			return err
		}
		t.layer.Symlink(c, target)
		next := target
		if !path.IsAbs(target) {
			next = path.Join(path.Dir(c), target)
		}
		return t.add(next, depth+1)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("tools: /%s is not a regular file", c)
	}
	mode := fs.FileMode(0o644)
	if fi.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	t.layer.HostFile(c, host, mode)
	interp, needed, err := elfNeeds(host)
	if err != nil {
		return fmt.Errorf("tools: /%s: %w", c, err)
	}
	if interp != "" {
		if err := t.add(interp, depth+1); err != nil {
			return err
		}
	}
	for _, lib := range needed {
		if err := t.addLib(lib, c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (t *toolTree) addLib(lib, of string, depth int) error {
	for _, dir := range t.libDirs {
		if _, _, ok := t.lookup(dir + "/" + lib); ok {
			return t.add(dir+"/"+lib, depth)
		}
	}
	return fmt.Errorf("tools: %s, needed by /%s, is in none of the Debian packages (add its package to hack/debs.sh)", lib, of)
}

// elfNeeds reads an ELF file's program interpreter and DT_NEEDED entries; a file that is not
// ELF (a script, a configuration file) needs nothing.
func elfNeeds(file string) (string, []string, error) {
	f, err := elf.Open(file)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return "", nil, nil
		}
		return "", nil, err
	}
	defer f.Close()
	var interp string
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return "", nil, err
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return "", nil, err
	}
	return interp, needed, nil
}
