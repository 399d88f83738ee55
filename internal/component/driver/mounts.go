package driver

import (
	"path"
	"path/filepath"
	"strings"

	mount "k8s.io/mount-utils"
)

// mountTable is a snapshot of /proc/self/mountinfo: the kernel, not our records, is the
// owner of what is mounted.
type mountTable []mount.MountInfo

func readMountTable() (mountTable, error) {
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	return mountTable(infos), err
}

// at returns the topmost mount whose mount point is p, or nil.
func (t mountTable) at(p string) *mount.MountInfo {
	p = filepath.Clean(p)
	for i := len(t) - 1; i >= 0; i-- {
		if t[i].MountPoint == p {
			return &t[i]
		}
	}
	return nil
}

// below returns the mount under the topmost one whose mount point is p (two stacked at p),
// or nil.
func (t mountTable) below(p string) *mount.MountInfo {
	p = filepath.Clean(p)
	seen := false
	for i := len(t) - 1; i >= 0; i-- {
		if t[i].MountPoint == p {
			if seen {
				return &t[i]
			}
			seen = true
		}
	}
	return nil
}

// containing returns the mount that holds p: the one with the longest mount point that is
// p or a parent of p (the last one listed wins when mounts are stacked).
func (t mountTable) containing(p string) *mount.MountInfo {
	p = filepath.Clean(p)
	var best *mount.MountInfo
	for i := range t {
		mp := t[i].MountPoint
		if mp == p || mp == "/" || strings.HasPrefix(p, mp+"/") {
			if best == nil || len(mp) >= len(best.MountPoint) {
				best = &t[i]
			}
		}
	}
	return best
}

// bindsOf lists the mount points whose source is directory dir or something inside it:
// the bind mounts of a dir volume. A bind mount appears in mountinfo with the device of the
// filesystem holding dir and a root of dir's path inside that filesystem.
func (t mountTable) bindsOf(dir string) []string {
	dir = filepath.Clean(dir)
	holder := t.containing(dir)
	if holder == nil {
		return nil
	}
	rel, err := filepath.Rel(holder.MountPoint, dir)
	if err != nil {
		return nil
	}
	root := path.Join(holder.Root, rel)
	var out []string
	for _, m := range t {
		if m.Major != holder.Major || m.Minor != holder.Minor {
			continue
		}
		if m.Root == root || strings.HasPrefix(m.Root, root+"/") {
			out = append(out, m.MountPoint)
		}
	}
	return out
}

// mountsOfDevice lists the mount points of block device dev (a loop device path).
func (t mountTable) mountsOfDevice(dev string) []string {
	var out []string
	for _, m := range t {
		if m.Source == dev {
			out = append(out, m.MountPoint)
		}
	}
	return out
}
