package backend

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	mount "k8s.io/mount-utils"
)

// Release unmounts everything mounted under dir, deepest first, then detaches every loop
// device whose image is under dir. `kubevol up --reset` calls it before it removes its state
// (the node agent and the driver leave their mounts in place when they stop, as the kubelet
// does), and tests call it through drivertest.TempDir's cleanup, so a failing test leaves the
// machine as it found it.
func Release(dir string) error {
	dir = filepath.Clean(dir)
	var errs []error
	for {
		infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		var under []string
		for _, m := range infos {
			if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
				under = append(under, m.MountPoint)
			}
		}
		if len(under) == 0 {
			break
		}
		sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
		progress := false
		for _, mp := range under {
			out, err := exec.Command("umount", mp).CombinedOutput()
			if err == nil {
				progress = true
				continue
			}
			if out2, err2 := exec.Command("umount", "-l", mp).CombinedOutput(); err2 == nil {
				progress = true
			} else {
				errs = append(errs, describeErr("umount "+mp+": "+strings.TrimSpace(string(out))+" "+strings.TrimSpace(string(out2)), err2))
			}
		}
		if !progress {
			break
		}
	}
	loops := &Loops{}
	devs, err := loops.List(context.Background())
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, d := range devs {
		if strings.HasPrefix(d.BackFile, dir+"/") {
			errs = append(errs, describeErr("detach "+d.Name, loops.Detach(context.Background(), d.Name)))
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists the mounts and loop devices still held under dir, for tests that check
// that everything was released.
func Leftovers(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range infos {
		if strings.HasPrefix(m.MountPoint, dir+"/") {
			out = append(out, "mount "+m.MountPoint)
		}
	}
	devs, err := (&Loops{}).List(context.Background())
	if err != nil {
		return out, err
	}
	for _, d := range devs {
		if strings.HasPrefix(d.BackFile, dir+"/") {
			out = append(out, "loop "+d.Name+" "+d.BackFile)
		}
	}
	return out, nil
}

func describeErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
