package volume

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	v1 "k8s.io/api/core/v1"
)

const (
	rwMask = os.FileMode(0o660)
	roMask = os.FileMode(0o440)
	exMask = os.FileMode(0o110)
)

// SetOwnership applies fsGroup to a volume as the kubelet does (pkg/volume
// SetVolumeOwnership): every entry gets group fsGroup, files gain g+rw (g+r if read-only),
// directories also g+x and setgid. With policy OnRootMismatch the walk is skipped when the
// root already complies. Symlinks are chowned but never chmodded or followed, which keeps
// the atomic writer's ..data links intact.
func SetOwnership(dir string, fsGroup *int64, readOnly bool, policy *v1.PodFSGroupChangePolicy) error {
	if fsGroup == nil {
		return nil
	}
	gid := int(*fsGroup)
	if policy != nil && *policy == v1.FSGroupChangeOnRootMismatch && rootComplies(dir, gid, readOnly) {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return applyOwnership(path, d, gid, readOnly)
	})
}

func applyOwnership(path string, d fs.DirEntry, gid int, readOnly bool) error {
	if err := os.Lchown(path, -1, gid); err != nil {
		return err
	}
	if d.Type()&fs.ModeSymlink != 0 {
		return nil
	}
	info, err := d.Info()
	if err != nil {
		return err
	}
	mask := rwMask
	if readOnly {
		mask = roMask
	}
	mode := info.Mode() | mask
	if info.IsDir() {
		mode |= os.ModeSetgid | exMask
	}
	if mode == info.Mode() {
		return nil
	}
	return os.Chmod(path, mode)
}

func rootComplies(dir string, gid int, readOnly bool) bool {
	info, err := os.Stat(dir)
	if err != nil {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || int(st.Gid) != gid {
		return false
	}
	mask := rwMask | exMask
	if readOnly {
		mask = roMask | exMask
	}
	return info.Mode()&mask == mask && info.Mode()&os.ModeSetgid != 0
}
