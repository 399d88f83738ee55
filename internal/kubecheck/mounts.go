package kubecheck

import (
	"strings"

	"k8s.io/mount-utils"
)

// MountsUnder lists the mount points below dir, in the order of /proc/self/mountinfo (a
// mount made later comes later).
func MountsUnder(dir string) []string {
	infos, _ := mount.ParseMountInfo("/proc/self/mountinfo")
	var out []string
	for _, mi := range infos {
		if strings.HasPrefix(mi.MountPoint, dir+"/") {
			out = append(out, mi.MountPoint)
		}
	}
	return out
}

// MountIDs maps the mount points below dir to their mount IDs: a remount gets a new ID.
func MountIDs(dir string) map[string]int {
	infos, _ := mount.ParseMountInfo("/proc/self/mountinfo")
	out := map[string]int{}
	for _, mi := range infos {
		if strings.HasPrefix(mi.MountPoint, dir+"/") {
			out[mi.MountPoint] = mi.ID
		}
	}
	return out
}
