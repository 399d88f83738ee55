package up

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/pkg/volume/removeall"
)

// MarkerFile, in a state directory, is up's durable record that it created the directory
// (or found it empty) and may wipe it: Reset removes nothing without it.
const MarkerFile = ".kubevol-up"

const markerHeader = "kubevol up state directory"

// claimDir creates dir, or takes an existing empty one, and marks it as up's own. A
// non-empty directory without the marker is used but not marked (a state directory of an
// older up, or a directory chosen by mistake), so Reset will refuse it; marked reports
// whether dir carries the marker.
func claimDir(dir string) (marked bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil { // as localcluster makes it
		return false, err
	}
	if err := checkMarker(dir); err == nil {
		return true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) > 0 {
		return false, err
	}
	return true, writeMarker(dir)
}

func writeMarker(dir string) error {
	tmp := filepath.Join(dir, MarkerFile+".tmp")
	body := fmt.Sprintf("%s\ndir: %s\ncreated: %s\n", markerHeader, dir, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, MarkerFile))
}

// checkMarker: dir holds a marker written for dir itself (one copied from, or left in a
// directory moved from, elsewhere does not count). fs.ErrNotExist when there is none.
func checkMarker(dir string) error {
	p := filepath.Join(dir, MarkerFile)
	info, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var header, owner string
	for i := 0; sc.Scan() && i < 10; i++ {
		line := sc.Text()
		if i == 0 {
			header = line
		}
		if v, ok := strings.CutPrefix(line, "dir: "); ok {
			owner = v
		}
	}
	switch {
	case header != markerHeader:
		return fmt.Errorf("%s does not start with %q", p, markerHeader)
	case owner != dir:
		return fmt.Errorf("%s was written for %q, not for %s (a moved or copied directory)", p, owner, dir)
	}
	return nil
}

// Reset wipes a stopped stack's state directory, if up marked it as its own (see
// claimDir); a missing or empty directory is left as it is. The node agent and the driver
// leave their mounts and loop devices in place when they stop, as the kubelet does, so
// that a restart finds them; a reset must take them down first, deepest mount first, or
// the removal fails on a busy mount point and the loop devices outlive their images. The
// removal itself never enters a mount that is still there: it stops with an error naming
// it. The marker goes last, so an interrupted reset can be run again.
func Reset(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("reset: %w", err)
	case len(entries) == 0:
		return nil
	}
	if err := checkMarker(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reset: refusing to wipe %s: it has no %s marker, so nothing proves kubevol up made it. "+
			"If it is the state directory of a kubevol up from before the marker existed, stop that up, check the directory, "+
			"and either remove it by hand or mark it with: printf '%s\\ndir: %s\\n' > %s",
			dir, MarkerFile, markerHeader, dir, filepath.Join(dir, MarkerFile))
	} else if err != nil {
		return fmt.Errorf("reset: refusing to wipe %s: %w; remove it by hand if it is a kubevol up state directory", dir, err)
	}
	if err := backend.Release(dir); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	for _, e := range entries {
		if e.Name() == MarkerFile {
			continue
		}
		if err := removeall.All(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	if err := os.Remove(filepath.Join(dir, MarkerFile)); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}
