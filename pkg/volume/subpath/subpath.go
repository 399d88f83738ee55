// Package subpath bind-mounts a volumeMount's subPath safely, as the kubelet's
// pkg/volume/util/subpath does after CVE-2017-1002101 and CVE-2021-25741: the path is
// resolved and checked to stay inside the volume, then opened component by component with
// O_NOFOLLOW from the volume root, and the bind mount is made from the opened file
// descriptor (/proc/self/fd/N). A component swapped for a symlink between the check and
// the mount makes the open fail instead of mounting what the symlink points to.
package subpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/mount-utils"
)

// ErrEscapes is returned for a subPath that leaves its volume.
var ErrEscapes = errors.New("subPath escapes the volume")

// Prepare bind-mounts <volumePath>/<subPath> at target, creating the subPath as a
// directory inside the volume if it does not exist (kubelet behaviour). target is created
// as a file or directory to match. An existing mount at target is left as is. volumePath
// must be absolute: an empty or relative one (a volume with no directory on the node, such
// as an image volume) would be resolved against the working directory, and is refused.
func Prepare(m mount.Interface, volumePath, subPath, target string, readOnly bool) error {
	if !filepath.IsAbs(volumePath) {
		return fmt.Errorf("volume path %q is not an absolute path on the node", volumePath)
	}
	if err := validate(subPath); err != nil {
		return err
	}
	// A bind mount from the same filesystem keeps the device number, so only the mount
	// table tells whether target is already mounted (after a restart, say).
	if mounted, err := m.IsMountPoint(target); err == nil && mounted {
		return nil
	}
	base, err := filepath.EvalSymlinks(volumePath)
	if err != nil {
		return err
	}
	full := filepath.Join(base, subPath)
	if _, err := os.Lstat(full); errors.Is(err, fs.ErrNotExist) {
		if err := safeMkdirAll(base, subPath); err != nil {
			return err
		}
	}
	resolved, err := filepath.EvalSymlinks(full)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(base, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%w: %s resolves to %s, outside %s", ErrEscapes, subPath, resolved, base)
	}
	fd, err := openNoFollow(base, rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(target, 0o750)
	} else {
		var f *os.File
		f, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o640)
		if f != nil {
			f.Close()
		}
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	return m.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", opts)
}

func validate(subPath string) error {
	if subPath == "" || filepath.IsAbs(subPath) {
		return fmt.Errorf("%w: %q must be a relative path", ErrEscapes, subPath)
	}
	for _, e := range strings.Split(subPath, "/") {
		if e == ".." {
			return fmt.Errorf("%w: %q must not contain '..'", ErrEscapes, subPath)
		}
	}
	return nil
}

// openNoFollow opens base/rel one component at a time with O_NOFOLLOW, so that no symlink
// is followed anywhere in rel, and returns an O_PATH descriptor.
func openNoFollow(base, rel string) (int, error) {
	fd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return fd, nil
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(next)
			return -1, fmt.Errorf("%w: %s/%s became a symlink", ErrEscapes, base, rel)
		}
		fd = next
	}
	return fd, nil
}

// safeMkdirAll creates the missing directories of rel under base without following
// symlinks (upstream SafeMakeDir), 0750.
func safeMkdirAll(base, rel string) error {
	fd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		if err := unix.Mkdirat(fd, c, 0o750); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return err
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%w: create %s: %v", ErrEscapes, rel, err)
		}
		fd = next
	}
	unix.Close(fd)
	return nil
}
