package volume

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/mount-utils"
)

// NewMounter returns the production mount.Interface. tmpfs and bind mounts, which are
// almost all a node agent does, are plain mount(2)/umount(2) syscalls instead of a fork of
// /bin/mount: on a node with thousands of secret and configMap volumes the fork dominates.
// Everything else goes to k8s.io/mount-utils. Unit tests use mount.NewFakeMounter instead.
func NewMounter() mount.Interface {
	return &sysMounter{Interface: mount.New("")}
}

type sysMounter struct{ mount.Interface }

func (m *sysMounter) Mount(source, target, fstype string, options []string) error {
	return m.MountSensitiveWithoutSystemd(source, target, fstype, options, nil)
}

func (m *sysMounter) MountSensitive(source, target, fstype string, options, sensitive []string) error {
	return m.MountSensitiveWithoutSystemd(source, target, fstype, options, sensitive)
}

func (m *sysMounter) MountSensitiveWithoutSystemd(source, target, fstype string, options, sensitive []string) error {
	flags, data, ok := syscallFlags(fstype, append(append([]string{}, options...), sensitive...))
	if !ok {
		return m.Interface.MountSensitiveWithoutSystemd(source, target, fstype, options, sensitive)
	}
	if flags&unix.MS_BIND != 0 {
		// A bind mount ignores every flag but MS_REC at first; ro, nosuid, nodev and noexec
		// need a remount (as mount-utils' bind,remount).
		if err := unix.Mount(source, target, "", flags&(unix.MS_BIND|unix.MS_REC), ""); err != nil {
			return fmt.Errorf("bind mount %s at %s: %w", source, target, err)
		}
		if perMount := flags &^ (unix.MS_BIND | unix.MS_REC); perMount != 0 {
			if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|perMount, ""); err != nil {
				_ = unix.Unmount(target, 0)
				return fmt.Errorf("remount %s with %v: %w", target, options, err)
			}
		}
		return nil
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s %s at %s: %w", fstype, source, target, err)
	}
	return nil
}

func (m *sysMounter) Unmount(target string) error {
	if err := unix.Unmount(target, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

// syscallFlags maps options to mount(2) arguments for tmpfs and bind mounts; ok is false
// for anything else.
func syscallFlags(fstype string, options []string) (flags uintptr, data string, ok bool) {
	bind := false
	var rest []string
	for _, o := range options {
		switch o {
		case "bind":
			bind = true
			flags |= unix.MS_BIND
		case "rbind":
			bind = true
			flags |= unix.MS_BIND | unix.MS_REC
		case "ro":
			flags |= unix.MS_RDONLY
		case "rw", "defaults":
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "noexec":
			flags |= unix.MS_NOEXEC
		default:
			rest = append(rest, o)
		}
	}
	switch {
	case bind && len(rest) == 0:
		return flags, "", true
	case !bind && fstype == "tmpfs":
		return flags, strings.Join(rest, ","), true
	}
	return 0, "", false
}
