package driver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kubevol/kubevol/internal/component/driver/state"
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
		if err := n.rebind(table, p.TargetPath, publishSource(p), mi.MountOptions, ro); err != nil {
			return fmt.Errorf("remount %s: %w", p.TargetPath, err)
		}
		klogFrom(ctx, n.log).V(2).Info("Remounted a publish for its new parameters", "volumeID", id, "target", p.TargetPath, "readOnly", ro)
	}
	return nil
}

// publishSource is what a publish binds at its target.
func publishSource(p state.Publish) string {
	if p.Block {
		return p.Device
	}
	return p.StagingPath
}

// rebind makes the bind mount at target read-only or read-write again. A remount changes
// only this mount namespace's copy of the mount, so a driver in a container (its target
// directory shared with the host's, Bidirectional) would leave the host's copy, the one
// the kubelet gives new containers, as it was. Read-only is therefore a read-only clone of
// source stacked on the mount (bindReadOnly), which propagates; read-write again is that
// clone unmounted, an unmount propagating too. A mount not stacked so (a kernel without
// open_tree, or a read-only publish from before) is remounted in place.
func (n *node) rebind(table mountTable, target, source string, opts []string, ro bool) error {
	var others []string
	for _, o := range opts {
		if _, ok := perMountOptions[o]; ok {
			others = append(others, o)
		}
	}
	if ro {
		if err := bindReadOnly(source, target, append([]string{"ro"}, others...)); !errors.Is(err, errNoBindAttrs) {
			return err
		}
	} else if below := table.below(target); below != nil && !slices.Contains(below.MountOptions, "ro") {
		return n.mounter.Unmount(target)
	}
	return remountBind(target, opts, ro)
}

// perMountOptions are the mountinfo per-mount options besides ro a bind keeps: the flag a
// bind remount must repeat (it replaces them all), and the attribute a detached clone
// (bindReadOnly) is given.
var perMountOptions = map[string]struct {
	flag uintptr
	attr uint64
}{
	"nosuid": {unix.MS_NOSUID, unix.MOUNT_ATTR_NOSUID}, "nodev": {unix.MS_NODEV, unix.MOUNT_ATTR_NODEV},
	"noexec": {unix.MS_NOEXEC, unix.MOUNT_ATTR_NOEXEC}, "noatime": {unix.MS_NOATIME, unix.MOUNT_ATTR_NOATIME},
	"nodiratime": {unix.MS_NODIRATIME, unix.MOUNT_ATTR_NODIRATIME}, "relatime": {unix.MS_RELATIME, unix.MOUNT_ATTR_RELATIME},
	"strictatime": {unix.MS_STRICTATIME, unix.MOUNT_ATTR_STRICTATIME},
}

// remountBind changes a bind mount between read-only and read-write in place, keeping its
// other per-mount flags: a bind remount replaces them all, so they are read back first.
func remountBind(target string, opts []string, ro bool) error {
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND)
	for _, o := range opts {
		flags |= perMountOptions[o].flag
	}
	if ro {
		flags |= unix.MS_RDONLY
	}
	return unix.Mount("", target, "", flags, "")
}

// followInterval is how often a node process without the controller reads the controller's
// record for changed mutable parameters.
const followInterval = time.Second

// followModifications is, in a node process without the controller (a split deployment,
// where ControllerModifyVolume runs in another process and cannot reach these publishes),
// what the controller's modified hook is in one process: until ctx ends, it applies each
// published volume's mutable parameters, as the controller's record has them, to the
// volume's live publishes. A volume is applied again only when its parameters differ from
// those last applied (or a publish came or went), so an idle node reads one file a second.
// A volume whose in-flight lock is busy waits for the next round; one that fails is tried
// every round, and logged when its error changes.
func (n *node) followModifications(ctx context.Context) {
	applied := map[string]string{} // volume ID -> parameters and publishes last applied
	failed := map[string]string{}  // volume ID -> the error last logged
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		seen := map[string]bool{}
		records := n.controllerVolumes() // one read of the controller's file per round
		for _, id := range n.publishedVolumes() {
			seen[id] = true
			v := records[id]
			if v == nil || v.Creating {
				continue
			}
			key := fmt.Sprint(v.MutableParameters, n.publishesOf(id))
			if applied[id] == key {
				continue
			}
			release, err := n.locks.acquire(volumeKey(id))
			if err != nil {
				continue
			}
			err = n.applyMutable(ctx, id, v.MutableParameters)
			release()
			if err != nil {
				if failed[id] != err.Error() {
					klogFrom(ctx, n.log).Error(err, "Cannot apply the volume's mutable parameters to its publishes", "volumeID", id)
					failed[id] = err.Error()
				}
				continue
			}
			applied[id] = key
			delete(failed, id)
		}
		for id := range applied {
			if !seen[id] {
				delete(applied, id)
			}
		}
		for id := range failed {
			if !seen[id] {
				delete(failed, id)
			}
		}
	}
}

// publishedVolumes lists the IDs of the volumes with a publish on this node.
func (n *node) publishedVolumes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := map[string]bool{}
	for _, p := range n.st.Publishes {
		ids[p.VolumeID] = true
	}
	return slices.Sorted(maps.Keys(ids))
}
