package backend

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// copySparseFile copies src to a new file dst, keeping holes as holes: only the data extents
// found with SEEK_DATA/SEEK_HOLE are copied, so a mostly empty 10 GiB image copies in
// milliseconds and costs no space. dst is then sized to max(size, len(src)).
func copySparseFile(src, dst string, size int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if err := copyExtents(in, out, fi.Size()); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Truncate(max(size, fi.Size())); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

func copyExtents(in, out *os.File, end int64) error {
	inFd, outFd := int(in.Fd()), int(out.Fd())
	for pos := int64(0); pos < end; {
		data, err := unix.Seek(inFd, pos, unix.SEEK_DATA)
		if errors.Is(err, syscall.ENXIO) {
			return nil // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(inFd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		for off := data; off < hole; {
			roff, woff := off, off
			n, err := unix.CopyFileRange(inFd, &roff, outFd, &woff, int(hole-off), 0)
			if err != nil {
				return fmt.Errorf("copy_file_range: %w", err)
			}
			if n == 0 {
				return io.ErrUnexpectedEOF
			}
			off += int64(n)
		}
		pos = hole
	}
	return nil
}

// copyTree copies the directory src to dst (which must not exist), with modes, owners,
// symlinks and sparse files. Device nodes, sockets and FIFOs are skipped: they cannot hold
// volume data.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, fi.Mode().Perm()); err != nil {
				return err
			}
			if err := os.Chmod(target, fi.Mode()&(fs.ModePerm|fs.ModeSetgid|fs.ModeSetuid|fs.ModeSticky)); err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := copySparseFile(p, target, 0); err != nil {
				return err
			}
		default:
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			return os.Lchown(target, int(st.Uid), int(st.Gid))
		}
		return nil
	})
}

// treeUsage sums the allocated bytes of everything under dir, like du.
func treeUsage(dir string) (int64, error) {
	b, _, err := TreeUsage(dir)
	return b, err
}

// TreeUsage reports the allocated bytes and the inode count under dir. Entries that vanish
// during the walk are skipped: the volume may be in use.
func TreeUsage(dir string) (bytes, inodes int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		inodes++
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			bytes += st.Blocks * 512
		}
		return nil
	})
	return bytes, inodes, err
}

// allocatedBytes is what a (sparse) file really occupies.
func allocatedBytes(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512, nil
	}
	return fi.Size(), nil
}

// AllocatedBytes is what the file at path really occupies.
func AllocatedBytes(path string) (int64, error) { return allocatedBytes(path) }
