// Package dist writes kubevol's release archives (`make dist`, docs/install.md): one gzipped
// tarball per platform holding kubevol and the control plane it runs (kubevol-cluster)
// side by side in one directory, as `kubevol up` looks for it, and a SHA256SUMS file of the
// archives. Like the images (internal/build/ociimage), the archives are reproducible: fixed times
// (the epoch), root owners, fixed modes, a fixed order and no gzip name or time, so the same
// binaries give the same archive and the same checksum.
package dist

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kubevol/kubevol/internal/runtime/atomicfile"
)

// SumsFile is the checksum file beside the archives, in `sha256sum -c` format.
const SumsFile = "SHA256SUMS"

// Name is the archive's base name without extension, also its top directory:
// kubevol-<version>-<os>-<arch>.
func Name(version, goos, goarch string) string {
	return fmt.Sprintf("kubevol-%s-%s-%s", version, goos, goarch)
}

// File is one file of an archive: Src on disk, stored as Name in the top directory.
type File struct {
	Name, Src string
	Mode      os.FileMode
}

// WriteArchive writes dir/<top>.tar.gz with files under the directory top and returns its
// path.
func WriteArchive(dir, top string, files []File) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, top+".tar.gz")
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	if err := writeTarGz(f, top, files); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return out, os.Rename(tmp, out)
}

func writeTarGz(w io.Writer, top string, files []File) error {
	zw := gzip.NewWriter(w) // no Name, no ModTime: the same input gives the same bytes
	tw := tar.NewWriter(zw)
	epoch := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: top + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR}); err != nil {
		return err
	}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, file := range sorted {
		if err := addFile(tw, top, file, epoch); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func addFile(tw *tar.Writer, top string, file File, mtime time.Time) error {
	src, err := os.Open(file.Src)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", file.Src)
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: top + "/" + file.Name, Mode: int64(file.Mode.Perm()), Size: st.Size(), ModTime: mtime, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// WriteSums writes dir/SHA256SUMS for the files of dir named, sorted, as sha256sum prints
// them, and returns its content.
func WriteSums(dir string, names []string) (string, error) {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	var b strings.Builder
	for _, n := range sorted {
		sum, err := fileSHA256(filepath.Join(dir, n))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return b.String(), atomicfile.Write(filepath.Join(dir, SumsFile), []byte(b.String()), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
