package up

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kubevol/kubevol/internal/driver/backend"
)

// Reset wipes a stopped stack's state directory. The node agent and the driver leave their
// mounts and loop devices in place when they stop, as the kubelet does, so that a restart
// finds them; a reset must take them down first, deepest mount first, or the removal fails
// on a busy mount point and the loop devices outlive their images.
func Reset(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := backend.Release(dir); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return os.RemoveAll(dir)
}
