package backend

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// blockBackend keeps each volume as a sparse image file. The node attaches it as a loop
// device; the file's length is the device's size, so capacity is real.
type blockBackend struct{ l Layout }

func (b *blockBackend) Type() string { return state.TypeBlock }
func (b *blockBackend) VolumePath(id string) string {
	return filepath.Join(b.l.Volumes, id+imageSuffix)
}
func (b *blockBackend) SnapshotPath(id string) string {
	return filepath.Join(b.l.Snapshots, id+imageSuffix)
}

func (b *blockBackend) CreateVolume(id string, size int64, fromPath string) error {
	final := b.VolumePath(id)
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	tmp := final + tempSuffix
	_ = os.Remove(tmp)
	var err error
	if fromPath == "" {
		err = createSparse(tmp, size)
	} else {
		err = copySparseFile(fromPath, tmp, size)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return publish(tmp, final)
}

func (b *blockBackend) DeleteVolume(id string) error {
	err := os.Remove(b.VolumePath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (b *blockBackend) ExpandVolume(id string, size int64) error {
	p := b.VolumePath(id)
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.Size() >= size {
		return nil
	}
	return os.Truncate(p, size)
}

func (b *blockBackend) CreateSnapshot(volumeID, snapshotID string) (int64, error) {
	final := b.SnapshotPath(snapshotID)
	if _, err := os.Stat(final); err == nil {
		return allocatedBytes(final)
	}
	tmp := final + tempSuffix
	_ = os.Remove(tmp)
	if err := copySparseFile(b.VolumePath(volumeID), tmp, 0); err != nil {
		_ = os.Remove(tmp)
		return 0, err
	}
	if err := publish(tmp, final); err != nil {
		return 0, err
	}
	return allocatedBytes(final)
}

func (b *blockBackend) DeleteSnapshot(id string) error {
	err := os.Remove(b.SnapshotPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (b *blockBackend) VolumeExists(id string) (bool, error) { return exists(b.VolumePath(id)) }

func (b *blockBackend) UsedBytes(id string) (int64, error) { return allocatedBytes(b.VolumePath(id)) }

func createSparse(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
