package driver

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// readOnlyVolume reports whether the volume's mutable parameters make it read-only, as the
// controller's record says (nil for an inline ephemeral volume: it has none).
func (n *node) readOnlyVolume(id string) bool {
	if v := n.catalog(id); v != nil {
		return readOnlyParam(v.MutableParameters)
	}
	return false
}

// applyMutable brings the live publishes of volume id in line with its new mutable
// parameters: each target is remounted read-only or back to read-write (unless the CO
// published it read-only). The caller holds the volume's in-flight lock.
func (n *node) applyMutable(ctx context.Context, id string, mutable map[string]string) error {
	table, err := readMountTable()
	if err != nil {
		return err
	}
	for _, p := range n.publishesOf(id) {
		mi := table.at(p.TargetPath)
		if mi == nil {
			continue // not mounted: the next publish or repair mounts it as the record says
		}
		ro := p.ReadOnly || readOnlyParam(mutable)
		if slices.Contains(mi.MountOptions, "ro") == ro {
			continue
		}
		if err := remountBind(p.TargetPath, mi.MountOptions, ro); err != nil {
			return fmt.Errorf("remount %s: %w", p.TargetPath, err)
		}
		klogFrom(ctx, n.log).V(2).Info("Remounted a publish for its new parameters", "volumeID", id, "target", p.TargetPath, "readOnly", ro)
	}
	return nil
}

// perMountFlags are the mountinfo per-mount options a bind remount must repeat.
var perMountFlags = map[string]uintptr{
	"nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC, "noatime": unix.MS_NOATIME,
	"nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME, "strictatime": unix.MS_STRICTATIME,
}

// remountBind changes a bind mount between read-only and read-write in place, keeping its
// other per-mount flags: a bind remount replaces them all, so they are read back first.
func remountBind(target string, opts []string, ro bool) error {
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND)
	for _, o := range opts {
		flags |= perMountFlags[o]
	}
	if ro {
		flags |= unix.MS_RDONLY
	}
	return unix.Mount("", target, "", flags, "")
}
