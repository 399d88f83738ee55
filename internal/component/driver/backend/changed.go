package backend

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// ChangedSince reports whether anything under path (a volume directory or image file) had
// its inode changed at or after t: a write, a truncation, a rename, a new or removed entry
// (the parent directory's ctime moves), or a metadata change. The kernel sets ctime on every
// such change and no caller can set it back, so a tree whose ctimes are all older than t has
// not changed since t. Group snapshots use it to prove that copies taken one after the other
// all equal the volumes at one instant.
func ChangedSince(path string, t time.Time) (bool, error) {
	changed := false
	err := filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && p != path {
				changed = true // removed while we walked
				return nil
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) && p != path {
				changed = true
				return nil
			}
			return err
		}
		if !time.Unix(st.Ctim.Sec, st.Ctim.Nsec).Before(t) {
			changed = true
			return filepath.SkipAll
		}
		return nil
	})
	return changed, err
}
