// Package atomicwriter writes a set of files into a volume so that a reader never sees a
// half-written set (upstream: pkg/volume/util AtomicWriter). The files go into a fresh
// timestamped directory; the ..data symlink is then swapped to it by rename(2), which is
// atomic; the user-visible names are symlinks through ..data:
//
//	<dir>/..2026_01_02_15_04_05.123456789/<files>
//	<dir>/..data -> ..2026_01_02_15_04_05.123456789
//	<dir>/<name> -> ..data/<name>
package atomicwriter

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	maxFileName    = 255
	maxPath        = 4096
)

// FileProjection is the content, mode and owner of one file of the payload.
type FileProjection struct {
	Data []byte
	Mode int32
	// FsUser, when set, owns the file (service account tokens with runAsUser).
	FsUser *int64
}

// ValidatePath rejects what could escape the volume or collide with the writer's own
// entries: absolute paths, ".." elements, a leading "..", and names longer than the kernel
// allows.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return errors.New("path is empty")
	case len(p) > maxPath:
		return fmt.Errorf("path %q is longer than %d bytes", p, maxPath)
	case filepath.IsAbs(p):
		return fmt.Errorf("path %q must be relative", p)
	case strings.HasPrefix(p, ".."):
		return fmt.Errorf("path %q must not start with '..'", p)
	}
	for _, e := range strings.Split(p, string(os.PathSeparator)) {
		if e == ".." {
			return fmt.Errorf("path %q must not contain '..'", p)
		}
		if len(e) > maxFileName {
			return fmt.Errorf("path %q has an element longer than %d bytes", p, maxFileName)
		}
	}
	return nil
}

// Write makes dir hold exactly payload (paths relative to dir). When nothing changed it
// only makes sure the user-visible links exist. setPerms, if not nil, is called on the new
// timestamped directory (its name relative to dir) before it is published, e.g. to apply
// fsGroup. A failed Write leaves the previous set in place.
func Write(dir string, payload map[string]FileProjection, setPerms func(tsDir string) error) error {
	clean := make(map[string]FileProjection, len(payload))
	for p, f := range payload {
		if err := ValidatePath(p); err != nil {
			return err
		}
		clean[filepath.Clean(p)] = f
	}
	oldTS, err := os.Readlink(filepath.Join(dir, dataDirName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", dataDirName, err)
	}
	if oldTS != "" && !isTimestampDir(oldTS) {
		return fmt.Errorf("%s points to %q, not a timestamped directory", dataDirName, oldTS)
	}

	if oldTS == "" || changed(filepath.Join(dir, oldTS), clean) {
		tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
		if err != nil {
			return err
		}
		tsName := filepath.Base(tsDir)
		if err := os.Chmod(tsDir, 0o755); err != nil {
			os.RemoveAll(tsDir)
			return err
		}
		if err := writeFiles(tsDir, clean); err != nil {
			os.RemoveAll(tsDir)
			return err
		}
		if setPerms != nil {
			if err := setPerms(tsName); err != nil {
				os.RemoveAll(tsDir)
				return fmt.Errorf("set permissions: %w", err)
			}
		}
		tmpLink := filepath.Join(dir, newDataDirName)
		_ = os.Remove(tmpLink)
		if err := os.Symlink(tsName, tmpLink); err != nil {
			os.RemoveAll(tsDir)
			return err
		}
		if err := os.Rename(tmpLink, filepath.Join(dir, dataDirName)); err != nil {
			os.Remove(tmpLink)
			os.RemoveAll(tsDir)
			return err
		}
		if oldTS != "" {
			defer os.RemoveAll(filepath.Join(dir, oldTS))
		}
	}
	return syncVisibleLinks(dir, clean)
}

func isTimestampDir(name string) bool {
	return strings.HasPrefix(name, "..") && name != dataDirName && name != newDataDirName && !strings.Contains(name, "/")
}

// changed compares bytes, modes and the file set: unlike upstream, a mode-only change is
// written too.
func changed(oldDir string, payload map[string]FileProjection) bool {
	n := 0
	differs := false
	err := filepath.WalkDir(oldDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		n++
		rel, _ := filepath.Rel(oldDir, path)
		f, ok := payload[rel]
		if !ok {
			differs = true
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != os.FileMode(f.Mode).Perm() {
			differs = true
			return fs.SkipAll
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(data, f.Data) {
			differs = true
			return fs.SkipAll
		}
		return nil
	})
	return err != nil || differs || n != len(payload)
}

func writeFiles(tsDir string, payload map[string]FileProjection) error {
	for p, f := range payload {
		full := filepath.Join(tsDir, p)
		if err := os.MkdirAll(filepath.Dir(full), os.ModePerm); err != nil {
			return err
		}
		if err := os.WriteFile(full, f.Data, os.FileMode(f.Mode).Perm()); err != nil {
			return err
		}
		// WriteFile's mode is filtered by the umask.
		if err := os.Chmod(full, os.FileMode(f.Mode).Perm()); err != nil {
			return err
		}
		if f.FsUser != nil {
			if err := os.Lchown(full, int(*f.FsUser), -1); err != nil {
				return err
			}
		}
	}
	return nil
}

// syncVisibleLinks makes one link per top-level name, <name> -> ..data/<name>, and removes
// links of names no longer in the payload.
func syncVisibleLinks(dir string, payload map[string]FileProjection) error {
	want := map[string]bool{}
	for p := range payload {
		want[strings.SplitN(p, string(os.PathSeparator), 2)[0]] = true
	}
	for name := range want {
		link := filepath.Join(dir, name)
		target := filepath.Join(dataDirName, name)
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") || want[name] || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if cur, err := os.Readlink(filepath.Join(dir, name)); err == nil && strings.HasPrefix(cur, dataDirName+"/") {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}
