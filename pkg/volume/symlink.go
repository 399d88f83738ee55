package volume

import (
	"os"
	"path/filepath"
)

// ReplaceSymlink makes link point at target, atomically replacing an older link: the
// pod's link to a mapped block device.
func ReplaceSymlink(target, link string) error {
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		return err
	}
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}
