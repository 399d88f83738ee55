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
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kubevol/kubevol/pkg/volume/removeall"
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

// ValidatePath reports whether p may name a file of a payload; see cleanPath.
func ValidatePath(p string) error {
	_, err := cleanPath(p)
	return err
}

// cleanPath validates p and returns it cleaned, as the file's path relative to the volume.
//
// The checks on p as given are the kubelet's (upstream atomic_writer.go validatePath): not
// empty, relative, at most 4096 bytes, no ".." element, no element over 255 bytes, and a
// first element that does not start with "..". Like upstream, the path is cleaned after
// these checks, so "./..foo" is accepted and published as the visible name "..foo", and
// "a/./b" and "a//b" as "a/b".
//
// Unlike upstream, the cleaned path is checked too: one that names the volume directory
// itself (".", "./") or whose first element is one of the writer's own names ("..data",
// "..data_tmp", a "..<timestamp>" directory, e.g. from "./..data") is refused, where
// upstream would write it and replace or loop its own links.
func cleanPath(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New("path is empty")
	case len(p) > maxPath:
		return "", fmt.Errorf("path %q is longer than %d bytes", p, maxPath)
	case filepath.IsAbs(p):
		return "", fmt.Errorf("path %q must be relative", p)
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	elems := strings.Split(p, string(os.PathSeparator))
	for _, e := range elems {
		if e == ".." {
			return "", fmt.Errorf("path %q must not contain '..'", p)
		}
		if len(e) > maxFileName {
			return "", fmt.Errorf("path %q has an element longer than %d bytes", p, maxFileName)
		}
	}
	if strings.HasPrefix(elems[0], "..") {
		return "", fmt.Errorf("path %q must not start with '..'", p)
	}
	clean := filepath.Clean(p)
	if clean == "." {
		return "", fmt.Errorf("path %q names the volume directory itself, not a file in it", p)
	}
	if first, _, _ := strings.Cut(clean, string(os.PathSeparator)); isReserved(first) {
		return "", fmt.Errorf("path %q cleans to %q, whose first element is a name the volume's writer keeps for itself (%s, %s and ..<timestamp> directories)",
			p, clean, dataDirName, newDataDirName)
	}
	return clean, nil
}

// isReserved: a top-level name the writer uses for itself.
func isReserved(name string) bool {
	return name == dataDirName || name == newDataDirName || isTimestampDir(name)
}

// tsPattern matches the names of the timestamped directories: "..", the UTC time as
// 2006_01_02_15_04_05, ".", and a random suffix (upstream's, and ours).
var tsPattern = regexp.MustCompile(`^\.\.[0-9]{4}_[0-9]{2}_[0-9]{2}_[0-9]{2}_[0-9]{2}_[0-9]{2}\.[^/]+$`)

func isTimestampDir(name string) bool { return tsPattern.MatchString(name) }

// cleanPayload validates and cleans every path. Two paths that clean to the same one, or a
// file that is also a directory of another path, are refused before anything is written
// (upstream keeps one of the duplicates at random, and fails on the conflict halfway).
func cleanPayload(payload map[string]FileProjection) (map[string]FileProjection, error) {
	clean := make(map[string]FileProjection, len(payload))
	from := make(map[string]string, len(payload))
	for p, f := range payload {
		c, err := cleanPath(p)
		if err != nil {
			return nil, err
		}
		if other, dup := from[c]; dup {
			a, b := min(p, other), max(p, other)
			return nil, fmt.Errorf("paths %q and %q both name %q", a, b, c)
		}
		from[c] = p
		clean[c] = f
	}
	for c, p := range from {
		for d := filepath.Dir(c); d != "."; d = filepath.Dir(d) {
			if other, ok := from[d]; ok {
				return nil, fmt.Errorf("path %q is a file, but path %q needs it to be a directory", other, p)
			}
		}
	}
	return clean, nil
}

// Write makes dir hold exactly payload (paths relative to dir). When nothing changed it
// only makes sure the user-visible links exist. setPerms, if not nil, is called on the new
// timestamped directory (its name relative to dir) before it is published, e.g. to apply
// fsGroup. A failed Write leaves the previous set in place. Timestamped directories that
// ..data does not point to (left by a crash) are removed on every Write. Writes to one dir
// are serialized by a lock on it.
func Write(dir string, payload map[string]FileProjection, setPerms func(tsDir string) error) error {
	clean, err := cleanPayload(payload)
	if err != nil {
		return err
	}
	unlock, err := lock(dir)
	if err != nil {
		return err
	}
	defer unlock()
	oldTS, err := os.Readlink(filepath.Join(dir, dataDirName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", dataDirName, err)
	}
	if oldTS != "" && !isTimestampDir(oldTS) {
		// Not ours to read: a link left by an older writer that let a payload replace it
		// (e.g. "..data -> ..data/..data"). Publishing a new set replaces it.
		oldTS = ""
	}
	if err := sweep(dir, oldTS); err != nil {
		return err
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
		_ = removeall.All(tsDir)
		return err
	}
	if setPerms != nil {
		if err := setPerms(tsName); err != nil {
			_ = removeall.All(tsDir)
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
		_ = removeall.All(tsDir)
		return err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataDirName)); err != nil {
		_ = os.Remove(tmpLink)
		_ = removeall.All(tsDir)
		return err
	}
	if err := syncVisibleLinks(dir, clean, oldTop); err != nil {
		return err
	}
	if oldTS != "" {
		// The new set is published; if this fails, the next Write's sweep retries it.
		_ = removeall.All(filepath.Join(dir, oldTS))
	}
	return nil
}

// sweep removes the timestamped directories other than current: a crash between creating
// one and publishing it, or before removing the one it replaced, leaves them behind.
func sweep(dir, current string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Type().IsDir() && e.Name() != current && isTimestampDir(e.Name()) {
			if err := removeall.All(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove orphaned data directory: %w", err)
			}
		}
	}
	return nil
}

// lock takes an exclusive lock on dir for one Write: the sweep must not take another
// writer's directory that is not published yet.
func lock(dir string) (func(), error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "lock", Path: dir, Err: err}
	}
	return func() { _ = unix.Close(fd) }, nil
}

// mkdirTimestamped creates <dir>/..<UTC time>.<random>, mode 0755 (the umask cannot
// narrow it: a volume's files are meant to be read by the pod's user).
func mkdirTimestamped(dir string) (string, error) {
	prefix := time.Now().UTC().Format("..2006_01_02_15_04_05.")
	for i := 0; ; i++ {
		p := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36))
		err := os.Mkdir(p, 0o755)
		if err == nil {
			return p, os.Chmod(p, 0o755) // Mkdir's mode is filtered by the umask
		}
		if !errors.Is(err, fs.ErrExist) || i > 10 {
			return "", err
		}
	}
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
		// WriteFile's mode is filtered by the umask; reading the umask would mean setting
		// it, a process-wide change, so the mode is set again unconditionally.
		if err := os.Chmod(full, mode); err != nil {
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
// links of names no longer in the payload. oldTop, when known, are the previous set's
// top-level names: if the new set has them all, no directory scan is needed.
func syncVisibleLinks(dir string, payload map[string]FileProjection, oldTop map[string]bool) error {
	want := map[string]bool{}
	for p := range payload {
		want[strings.SplitN(p, string(os.PathSeparator), 2)[0]] = true
	}
	for name := range want { // never a reserved name: cleanPath refuses those
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
		if isReserved(name) || want[name] || e.Type()&fs.ModeSymlink == 0 {
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
