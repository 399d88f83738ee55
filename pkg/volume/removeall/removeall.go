// Package removeall removes a directory tree that the node agent created, without ever
// deleting data that belongs to a mount inside it (upstream: the kubelet's
// removeall.RemoveAllOneFilesystem, used for orphaned pod directories). A mount that a
// check before the removal missed, or that appeared after it, must stop the removal of
// that entry: os.RemoveAll would descend into it and delete the mounted data.
//
// Unlike upstream, which compares device numbers (so a bind mount from the same
// filesystem passes as "one filesystem"), every entry is compared by mount ID, and the
// walk works on open directory descriptors, so a mount appearing on a path after it was
// checked is never entered.
package removeall

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrMountPoint is wrapped by the error of All when it left an entry alone because it is
// a mount point.
var ErrMountPoint = errors.New("is a mount point")

// All removes path and everything below it that is on the same mount as path's parent
// directory. Symbolic links are removed, never followed. An entry that is a mount point
// (another filesystem, or a bind mount of the same one) is left in place with its
// contents, the walk goes on with its siblings, and the first such error is returned,
// naming the entry; the directories holding it stay. A missing path is not an error.
func All(path string) error {
	var st unix.Statx_t
	if err := statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
			return unlinkErr(path, err)
		}
		return nil
	}
	var parent unix.Statx_t
	if err := statx(unix.AT_FDCWD, filepath.Dir(path), 0, &parent); err != nil {
		return &os.PathError{Op: "statx", Path: filepath.Dir(path), Err: err}
	}
	root := mountOf(&parent)
	if mountOf(&st) != root {
		return fmt.Errorf("not removing %s: it %w", path, ErrMountPoint)
	}
	fd, err := openDir(unix.AT_FDCWD, path, path, root)
	if err != nil {
		return err
	}
	first := removeContents(fd, path, root)
	_ = unix.Close(fd)
	if first != nil {
		return first
	}
	if err := unix.Rmdir(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return unlinkErr(path, err)
	}
	return nil
}

// mountID identifies the mount an entry is on: its mount ID where the kernel reports it
// (Linux 5.8 and later), else its device.
type mountID struct {
	mnt        uint64
	major, min uint32
}

func mountOf(st *unix.Statx_t) mountID {
	if st.Mask&unix.STATX_MNT_ID != 0 {
		return mountID{mnt: st.Mnt_id}
	}
	return mountID{major: st.Dev_major, min: st.Dev_minor}
}

func statx(dirfd int, name string, flags int, st *unix.Statx_t) error {
	for {
		err := unix.Statx(dirfd, name, flags|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_TYPE|unix.STATX_MNT_ID, st)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// openDir opens name under dirfd without following a symlink, and checks, on the open
// descriptor, that it is still on mount root: the entry may have been replaced or
// mounted over since it was looked at.
func openDir(dirfd int, name, display string, root mountID) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: display, Err: err}
	}
	var st unix.Statx_t
	if err := statx(fd, "", unix.AT_EMPTY_PATH, &st); err != nil {
		_ = unix.Close(fd)
		return -1, &os.PathError{Op: "statx", Path: display, Err: err}
	}
	if mountOf(&st) != root {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("not removing %s: it %w", display, ErrMountPoint)
	}
	return fd, nil
}

// removeContents empties the directory open as fd (shown as path in errors). It goes on
// after an error and returns the first one.
func removeContents(fd int, path string, root mountID) error {
	names, err := readNames(fd)
	if err != nil {
		return &os.PathError{Op: "readdir", Path: path, Err: err}
	}
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, name := range names {
		full := filepath.Join(path, name)
		var st unix.Statx_t
		if err := statx(fd, name, unix.AT_SYMLINK_NOFOLLOW, &st); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				keep(&os.PathError{Op: "statx", Path: full, Err: err})
			}
			continue
		}
		if mountOf(&st) != root {
			keep(fmt.Errorf("not removing %s: it %w", full, ErrMountPoint))
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := unix.Unlinkat(fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				keep(unlinkErr(full, err))
			}
			continue
		}
		child, err := openDir(fd, name, full, root)
		if err != nil {
			keep(err)
			continue
		}
		cerr := removeContents(child, full, root)
		_ = unix.Close(child)
		if cerr != nil {
			keep(cerr)
			continue
		}
		if err := unix.Unlinkat(fd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			keep(unlinkErr(full, err))
		}
	}
	return first
}

func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	return f.Readdirnames(-1)
}

// unlinkErr names a mount point the kernel refused to unlink (EBUSY): a mount on a file,
// or one that appeared after the entry was checked.
func unlinkErr(path string, err error) error {
	if errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("not removing %s: it %w", path, ErrMountPoint)
	}
	return &os.PathError{Op: "remove", Path: path, Err: err}
}
