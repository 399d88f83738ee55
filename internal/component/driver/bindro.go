package driver

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// errNoBindAttrs: bindReadOnly cannot make this mount; mount it the usual way.
var errNoBindAttrs = errors.New("not a read-only bind of mount attributes only")

// bindReadOnly bind-mounts source at target read-only from the start. A bind mount and a
// remount, mount(8)'s way, make the mount read-only only after it has propagated, and a
// remount does not propagate: a driver in a container whose target directory is shared with
// the host (Bidirectional) left the host's copy, the one the kubelet gives the pod,
// writable. A detached clone (open_tree) made read-only before it is attached (move_mount)
// propagates read-only. opts are the bind's options besides "bind"; any that is not a
// mount attribute, or a kernel without the calls, gives errNoBindAttrs.
func bindReadOnly(source, target string, opts []string) error {
	var attrs uint64
	for _, o := range opts {
		if o == "ro" {
			attrs |= unix.MOUNT_ATTR_RDONLY
			continue
		}
		po, ok := perMountOptions[o]
		if !ok {
			return errNoBindAttrs
		}
		attrs |= po.attr
	}
	if attrs&unix.MOUNT_ATTR_RDONLY == 0 {
		return errNoBindAttrs
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if errors.Is(err, unix.ENOSYS) {
		return errNoBindAttrs
	}
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", source, err)
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: attrs}); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", source, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s to %s: %w", source, target, err)
	}
	return nil
}
