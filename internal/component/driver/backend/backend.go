// Package backend keeps the bytes of kubevol volumes and snapshots: a directory per volume
// (type "dir") or a sparse file per volume that the node attaches as a loop device (type
// "block"). It knows nothing about CSI; the driver package maps RPCs onto it.
package backend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// Backend stores the volumes and snapshots of one type under two directories. Every method
// is idempotent, because CSI retries every call.
type Backend interface {
	Type() string
	// VolumePath is where the volume's bytes live: a directory or an image file.
	VolumePath(id string) string
	SnapshotPath(id string) string
	// CreateVolume makes an empty volume of size bytes, or a copy of the volume or snapshot
	// found at fromPath (a path of the same backend type). A partial copy never appears
	// under the final name.
	CreateVolume(id string, size int64, fromPath string) error
	DeleteVolume(id string) error
	// ExpandVolume grows the volume to size bytes; a smaller size is a no-op.
	ExpandVolume(id string, size int64) error
	// CreateSnapshot copies the volume and returns how many bytes the copy occupies.
	CreateSnapshot(volumeID, snapshotID string) (usedBytes int64, err error)
	DeleteSnapshot(id string) error
	VolumeExists(id string) (bool, error)
	// UsedBytes is what the volume occupies on the host filesystem.
	UsedBytes(id string) (int64, error)
}

// Layout is where one set of volumes and snapshots lives.
type Layout struct {
	Volumes   string
	Snapshots string
}

// New returns the backend of type typ over layout.
func New(typ string, l Layout) (Backend, error) {
	switch typ {
	case state.TypeDir:
		return &dirBackend{l: l}, nil
	case state.TypeBlock:
		return &blockBackend{l: l}, nil
	}
	return nil, fmt.Errorf("unknown backend type %q (want %q or %q)", typ, state.TypeDir, state.TypeBlock)
}

// MkdirAll creates the layout's directories.
func (l Layout) MkdirAll() error {
	for _, d := range []string{l.Volumes, l.Snapshots} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	return nil
}

// ValidID reports whether id can name a file under the layout. IDs come from the CO and
// must never escape the state directory.
func ValidID(id string) bool {
	if id == "" || len(id) > 128 || strings.HasPrefix(id, ".") {
		return false
	}
	return !strings.ContainsAny(id, "/\\\x00")
}

// tempSuffix marks a copy in progress. A restart removes one that an intent names and
// quarantines any other.
const tempSuffix = ".partial"

// imageSuffix names the image file of a block volume or snapshot.
const imageSuffix = ".img"

// Probe finds which backend holds volume id under l, by looking at the disk: the disk is
// the owner of what exists. It returns "" when the volume does not exist.
func Probe(l Layout, id string) (string, error) {
	if !ValidID(id) {
		return "", nil
	}
	if fi, err := os.Stat(filepath.Join(l.Volumes, id)); err == nil && fi.IsDir() {
		return state.TypeDir, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(l.Volumes, id+imageSuffix)); err == nil {
		return state.TypeBlock, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	return "", nil
}

// Entry is one volume or snapshot found on disk.
type Entry struct {
	ID   string
	Type string
	Path string
	// Partial marks a copy interrupted by a crash.
	Partial bool
}

// Scan lists what is stored in dir (a Volumes or Snapshots directory), so that a restart
// can compare the disk with the records.
func Scan(dir string) ([]Entry, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, de := range des {
		name := de.Name()
		e := Entry{Path: filepath.Join(dir, name)}
		if trimmed, ok := strings.CutSuffix(name, tempSuffix); ok {
			e.Partial = true
			name = trimmed
		}
		if id, ok := strings.CutSuffix(name, imageSuffix); ok && !de.IsDir() {
			e.ID, e.Type = id, state.TypeBlock
		} else if de.IsDir() {
			e.ID, e.Type = name, state.TypeDir
		} else {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// RemoveEntry deletes a scanned entry.
func RemoveEntry(e Entry) error {
	return os.RemoveAll(e.Path)
}

// publish renames a finished copy to its final name.
func publish(tmp, final string) error {
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return nil
}
