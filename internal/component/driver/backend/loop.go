package backend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// LoopDevice is one attached loop device as losetup reports it.
type LoopDevice struct {
	Name     string `json:"name"`
	BackFile string `json:"back-file"`
	// Deleted is set when the image was removed while still attached.
	Deleted bool `json:"-"`
}

// Loops drives loop devices through util-linux losetup, as the hostpath reference driver
// does for its block volumes.
type Loops struct {
	// attachMu serialises attaches in this process: two concurrent `losetup -f` could
	// otherwise both pick the same free device, and it makes "find, else attach" atomic.
	attachMu sync.Mutex
}

// List returns every attached loop device, preferring the JSON output and falling back to
// `losetup -a` for old util-linux releases.
func (l *Loops) List(ctx context.Context) ([]LoopDevice, error) {
	out, err := exec.CommandContext(ctx, "losetup", "-J", "-l", "-O", "NAME,BACK-FILE").Output()
	if err == nil {
		return ParseLosetupJSON(out)
	}
	out, err2 := exec.CommandContext(ctx, "losetup", "-a").Output()
	if err2 != nil {
		return nil, fmt.Errorf("losetup -J: %v; losetup -a: %w", err, err2)
	}
	return ParseLosetupList(out), nil
}

// Find returns the loop device backed by file, or "".
func (l *Loops) Find(ctx context.Context, file string) (string, error) {
	devs, err := l.List(ctx)
	if err != nil {
		return "", err
	}
	for _, d := range devs {
		if d.BackFile == file && !d.Deleted {
			return d.Name, nil
		}
	}
	return "", nil
}

// Attach returns the loop device of file, attaching one if there is none yet.
func (l *Loops) Attach(ctx context.Context, file string) (string, error) {
	l.attachMu.Lock()
	defer l.attachMu.Unlock()
	if dev, err := l.Find(ctx, file); err != nil || dev != "" {
		return dev, err
	}
	out, err := exec.CommandContext(ctx, "losetup", "-f", "--show", file).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup -f --show %s: %v: %s", file, err, bytes.TrimSpace(out))
	}
	return strings.TrimSpace(string(out)), nil
}

// Detach releases dev. A device that is already gone is not an error.
func (l *Loops) Detach(ctx context.Context, dev string) error {
	out, err := exec.CommandContext(ctx, "losetup", "-d", dev).CombinedOutput()
	if err != nil {
		msg := string(out)
		if strings.Contains(msg, "No such device") || strings.Contains(msg, "No such file") {
			return nil
		}
		return fmt.Errorf("losetup -d %s: %v: %s", dev, err, strings.TrimSpace(msg))
	}
	waitDetached(ctx, dev, 5*time.Second)
	return nil
}

// waitDetached waits, at most limit, until dev no longer has a backing file. losetup -d on
// a device that something still holds open (udev probing it after a resize, a filesystem
// being released) only marks it for autoclear, and the kernel detaches it when the last user
// closes it, usually within milliseconds. Without the wait a DeleteVolume right after
// NodeUnstageVolume finds the image still attached and is refused. A device still held
// after limit is left to autoclear.
func waitDetached(ctx context.Context, dev string, limit time.Duration) {
	backing := filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file")
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := os.Stat(backing); errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Refresh makes dev pick up a new length of its image, after an expansion.
func (l *Loops) Refresh(ctx context.Context, dev string) error {
	out, err := exec.CommandContext(ctx, "losetup", "-c", dev).CombinedOutput()
	if err != nil {
		return fmt.Errorf("losetup -c %s: %v: %s", dev, err, strings.TrimSpace(string(out)))
	}
	return nil
}

const deletedMark = " (deleted)"

// ParseLosetupJSON parses `losetup -J -l -O NAME,BACK-FILE`.
func ParseLosetupJSON(out []byte) ([]LoopDevice, error) {
	var doc struct {
		LoopDevices []LoopDevice `json:"loopdevices"`
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, nil // losetup prints nothing at all when no device is attached
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parse losetup -J output: %w", err)
	}
	for i := range doc.LoopDevices {
		doc.LoopDevices[i].BackFile, doc.LoopDevices[i].Deleted = strings.CutSuffix(doc.LoopDevices[i].BackFile, deletedMark)
	}
	return doc.LoopDevices, nil
}

// ParseLosetupList parses `losetup -a` lines such as
// "/dev/loop0: [2049]:1234 (/var/lib/x.img)".
func ParseLosetupList(out []byte) []LoopDevice {
	var devs []LoopDevice
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		open, close := strings.Index(rest, "("), strings.LastIndex(rest, ")")
		if open < 0 || close < open {
			continue
		}
		d := LoopDevice{Name: name}
		d.BackFile, d.Deleted = strings.CutSuffix(rest[open+1:close], deletedMark)
		if !d.Deleted && strings.HasSuffix(rest, deletedMark) {
			d.Deleted = true
		}
		devs = append(devs, d)
	}
	return devs
}
