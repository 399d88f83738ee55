package backend

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// dirBackend keeps each volume as a plain directory. Capacity is accounted by the driver
// against the pool, not enforced by the filesystem, as in the hostpath reference driver.
type dirBackend struct{ l Layout }

func (b *dirBackend) Type() string                  { return state.TypeDir }
func (b *dirBackend) VolumePath(id string) string   { return filepath.Join(b.l.Volumes, id) }
func (b *dirBackend) SnapshotPath(id string) string { return filepath.Join(b.l.Snapshots, id) }

func (b *dirBackend) CreateVolume(id string, _ int64, fromPath string) error {
	final := b.VolumePath(id)
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	if fromPath == "" {
		if err := os.Mkdir(final, 0o777); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		// Mkdir is filtered by the umask; pods of any UID must be able to write an
		// unconfigured volume, as with the hostpath driver. fsGroup tightens it later.
		return os.Chmod(final, 0o777)
	}
	tmp := final + tempSuffix
	_ = os.RemoveAll(tmp)
	if err := copyTree(fromPath, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return publish(tmp, final)
}

func (b *dirBackend) DeleteVolume(id string) error { return os.RemoveAll(b.VolumePath(id)) }

// ExpandVolume has nothing to do: a directory has no size of its own.
func (b *dirBackend) ExpandVolume(string, int64) error { return nil }

func (b *dirBackend) CreateSnapshot(volumeID, snapshotID string) (int64, error) {
	final := b.SnapshotPath(snapshotID)
	if _, err := os.Stat(final); err == nil {
		return treeUsage(final)
	}
	tmp := final + tempSuffix
	_ = os.RemoveAll(tmp)
	if err := copyTree(b.VolumePath(volumeID), tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return 0, err
	}
	if err := publish(tmp, final); err != nil {
		return 0, err
	}
	return treeUsage(final)
}

func (b *dirBackend) DeleteSnapshot(id string) error { return os.RemoveAll(b.SnapshotPath(id)) }

func (b *dirBackend) VolumeExists(id string) (bool, error) { return exists(b.VolumePath(id)) }

func (b *dirBackend) UsedBytes(id string) (int64, error) { return treeUsage(b.VolumePath(id)) }

func exists(p string) (bool, error) {
	_, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
