package up

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/driver/backend"
)

// Reset wipes a stopped stack's state directory. The node agent and the driver leave their
// mounts and loop devices in place when they stop, as the kubelet does, so that a restart
// finds them; a reset must take them down first, deepest mount first, or the removal fails
// on a busy mount point and the loop devices outlive their images.
func Reset(ctx context.Context, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	mps, err := mount.New("").List()
	if err != nil {
		return err
	}
	var below []string
	for _, mp := range mps {
		if strings.HasPrefix(mp.Path, dir+"/") {
			below = append(below, mp.Path)
		}
	}
	// Deeper paths first; a path mounted twice is unmounted twice.
	sort.Slice(below, func(i, j int) bool { return len(below[i]) > len(below[j]) })
	m := mount.New("")
	for _, p := range below {
		if err := m.Unmount(p); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	var loops backend.Loops
	devs, err := loops.List(ctx)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if strings.HasPrefix(d.BackFile, dir+"/") {
			if err := loops.Detach(ctx, d.Name); err != nil {
				return fmt.Errorf("reset: %w", err)
			}
		}
	}
	return os.RemoveAll(dir)
}
