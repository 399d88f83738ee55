package verify

import (
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// fsView is what the node's host sees of the filesystem at a volume's mount: its size
// (statfs) and its device (stat), which a filesystem of the volume's own has to itself.
type fsView struct {
	size int64
	dev  uint64
}

// ownSizeFactor bounds a filesystem of the volume's own against the volume's capacity: a
// driver may round a volume up, and a filesystem's size differs from its device's by its
// metadata, but a filesystem over four times the volume was not made for it.
const ownSizeFactor = 4

// notOwn says why the filesystem seen through a volume's mount is not the volume's own, so
// that its size says nothing of the volume's, or "" when it is. host maps paths of the
// node's host that no volume is mounted on (the node's root directory, "/") to their
// device. A mount on one of those devices is a directory of the host's filesystem, as the
// hostpath driver's and kubevol's type=dir volumes are, whatever its size says (an xfs
// project quota included): a wrong "not applicable" costs a driver one check, a wrong
// failure blames it for what it cannot fix, and a small host filesystem would pass for the
// volume's own by its size alone. A network filesystem (NFS, CephFS) has a device of its
// own per mount but the size of its whole export: capacity, the volume's size as the PV
// records it, tells those apart.
func notOwn(v fsView, capacity int64, host map[string]uint64) string {
	paths := make([]string, 0, len(host))
	for p := range host {
		paths = append(paths, p)
	}
	// The deepest path first: the node's root directory says more than "/".
	sort.Slice(paths, func(i, j int) bool {
		if len(paths[i]) != len(paths[j]) {
			return len(paths[i]) > len(paths[j])
		}
		return paths[i] < paths[j]
	})
	for _, p := range paths {
		if host[p] == v.dev {
			return fmt.Sprintf("the mount is on the filesystem that holds %s (device %d:%d), a directory of the host's filesystem", p, unix.Major(v.dev), unix.Minor(v.dev))
		}
	}
	if capacity > 0 && v.size > ownSizeFactor*capacity {
		return fmt.Sprintf("the filesystem inside the mount is %d bytes for a volume of %d, not the volume's own (a directory on a shared filesystem?)", v.size, capacity)
	}
	return ""
}

// observe reads the filesystem at dir, the mount of the claim's volume, and says why its
// size is not the volume's (notOwn), or "".
func (k *caseEnv) observe(dir, claim string) (fsView, string, error) {
	v, err := statFS(dir)
	if err != nil {
		return v, "", err
	}
	pv, err := k.boundPV(claim)
	if err != nil {
		return v, "", err
	}
	capacity := pv.Spec.Capacity[corev1.ResourceStorage]
	return v, notOwn(v, capacity.Value(), k.hostDevices()), nil
}

// hostDevices are the devices of the node's root directory and of the host's root: no
// volume's filesystem is either. A path that cannot be read is left out.
func (k *caseEnv) hostDevices() map[string]uint64 {
	out := map[string]uint64{}
	for _, p := range []string{k.root, "/"} {
		var st unix.Stat_t
		if p != "" && unix.Stat(p, &st) == nil {
			out[p] = st.Dev
		}
	}
	return out
}

func statFS(path string) (fsView, error) {
	size, err := fsSize(path)
	if err != nil {
		return fsView{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fsView{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return fsView{size: size, dev: st.Dev}, nil
}

// unobservable is the outcome of a size check on a volume without a filesystem of its own:
// not applicable, since no driver could make such a filesystem's size follow the volume's,
// with what did pass and how to make the check possible. checked says what the case
// verified before it came to the size.
func unobservable(checked, why string) error {
	return skip("size not observable: %s; %s, but the size check needs a filesystem or device of the volume's own: give --block-parameters the StorageClass parameters that make the driver offer one", why, checked)
}
