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
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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

	var oldTop map[string]bool
	if oldTS != "" {
		var differs bool
		differs, oldTop = changed(filepath.Join(dir, oldTS), clean)
		if !differs {
			return syncVisibleLinks(dir, clean, oldTop)
		}
	}
	tsDir, err := mkdirTimestamped(dir)
	if err != nil {
		return err
	}
	tsName := filepath.Base(tsDir)
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
	err = os.Symlink(tsName, tmpLink)
	if errors.Is(err, fs.ErrExist) { // left by a crash between symlink and rename
		_ = os.Remove(tmpLink)
		err = os.Symlink(tsName, tmpLink)
	}
	if err != nil {
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
	return syncVisibleLinks(dir, clean, oldTop)
}

// mkdirTimestamped creates <dir>/..<UTC time>.<random>, mode 0755 (the umask cannot
// narrow it: a volume's files are meant to be read by the pod's user).
func mkdirTimestamped(dir string) (string, error) {
	prefix := time.Now().UTC().Format("..2006_01_02_15_04_05.")
	for i := 0; ; i++ {
		p := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36))
		err := os.Mkdir(p, 0o755)
		if err == nil {
			if umask&0o755 != 0 {
				err = os.Chmod(p, 0o755)
			}
			return p, err
		}
		if !errors.Is(err, fs.ErrExist) || i > 10 {
			return "", err
		}
	}
}

// umask is the process umask, read once: a file's mode is chmodded only when it narrowed it.
var umask = func() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}()

func isTimestampDir(name string) bool {
	return strings.HasPrefix(name, "..") && name != dataDirName && name != newDataDirName && !strings.Contains(name, "/")
}

// changed compares bytes, modes and the file set: unlike upstream, a mode-only change is
// written too. It also returns the old set's top-level names, to prune their links.
func changed(oldDir string, payload map[string]FileProjection) (bool, map[string]bool) {
	n := 0
	differs := false
	top := map[string]bool{}
	err := filepath.WalkDir(oldDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		n++
		rel, _ := filepath.Rel(oldDir, path)
		top[strings.SplitN(rel, string(os.PathSeparator), 2)[0]] = true
		f, ok := payload[rel]
		if !ok {
			differs = true
			return nil
		}
		if differs {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != os.FileMode(f.Mode).Perm() {
			differs = true
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(data, f.Data) {
			differs = true
		}
		return nil
	})
	return err != nil || differs || n != len(payload), top
}

func writeFiles(tsDir string, payload map[string]FileProjection) error {
	for p, f := range payload {
		full := filepath.Join(tsDir, p)
		if strings.Contains(p, string(os.PathSeparator)) {
			if err := os.MkdirAll(filepath.Dir(full), os.ModePerm); err != nil {
				return err
			}
		}
		mode := os.FileMode(f.Mode).Perm()
		if err := os.WriteFile(full, f.Data, mode); err != nil {
			return err
		}
		// WriteFile's mode is filtered by the umask.
		if mode&umask != 0 {
			if err := os.Chmod(full, mode); err != nil {
				return err
			}
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
// links of names no longer in the payload. oldTop, when known, are the previous set's
// top-level names: if the new set has them all, no directory scan is needed.
func syncVisibleLinks(dir string, payload map[string]FileProjection, oldTop map[string]bool) error {
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
	if oldTop != nil {
		stale := false
		for name := range oldTop {
			stale = stale || !want[name]
		}
		if !stale {
			return nil
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
