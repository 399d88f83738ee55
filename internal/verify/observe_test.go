package verify

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// What verify decides about the filesystem in a volume's mount, for the volumes drivers
// make: a directory of the host's filesystem (hostpath, kubevol's type=dir), a network
// export's directory (NFS, CephFS), a filesystem of the volume's own.
func TestNotOwn(t *testing.T) {
	const (
		hostDev = 0x801 // 8:1, the disk holding / and the node's root directory
		nfsDev  = 0x2a  // 0:42, an anonymous device: one per network mount
		loopDev = 0x700 // 7:0, a loop device of the volume's own
	)
	host := map[string]uint64{"/": hostDev, "/var/lib/kubelet": hostDev}
	const claim = 300 << 20
	for _, c := range []struct {
		name     string
		v        fsView
		capacity int64
		want     string // in the reason; "" for a filesystem of the volume's own
	}{
		{"directory of the host's filesystem", fsView{size: 270553174016, dev: hostDev}, claim, "holds /var/lib/kubelet (device 8:1), a directory of the host's filesystem"},
		// A small host filesystem is still the host's: the device decides, not the size.
		{"directory of a small host filesystem", fsView{size: 1 << 30, dev: hostDev}, claim, "a directory of the host's filesystem"},
		{"network export", fsView{size: 270553174016, dev: nfsDev}, claim, "is 270553174016 bytes for a volume of 314572800, not the volume's own"},
		{"own filesystem", fsView{size: 290 << 20, dev: loopDev}, claim, ""},
		// A driver rounds a volume up; a network filesystem with a quota reports the quota.
		{"own filesystem rounded up", fsView{size: 1 << 30, dev: loopDev}, claim, ""},
		{"quota of a network filesystem", fsView{size: claim, dev: nfsDev}, claim, ""},
		// A PV without capacity: only the device can tell.
		{"no capacity recorded", fsView{size: 270553174016, dev: nfsDev}, 0, ""},
	} {
		got := notOwn(c.v, c.capacity, host)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// On this machine: a directory is on the filesystem of its parent, which notOwn names; a
// filesystem mounted on its own device (procfs here, as a volume's) is not.
func TestNotOwnOnThisHost(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "volumes", "pvc-1")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := statFS(vol)
	if err != nil {
		t.Fatal(err)
	}
	host := devices(t, dir, "/")
	if why := notOwn(v, 300<<20, host); !strings.Contains(why, "holds "+dir) {
		t.Errorf("a directory beside the node's root: %q, want it named on the filesystem of %s", why, dir)
	}
	proc, err := statFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if why := notOwn(proc, 300<<20, devices(t, "/")); why != "" {
		t.Errorf("a filesystem of its own device: %q", why)
	}
}

func devices(t *testing.T, paths ...string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		out[p] = st.Dev
	}
	return out
}

// The size check of a volume without a filesystem of its own is not applicable, with the
// reason and the hint, once the data checks passed; lost data still fails, and so does a
// filesystem of the volume's own that did not grow.
func TestGrownTellsUnobservableFromWrong(t *testing.T) {
	dir := t.TempDir()
	const proof = "written by kubevol verify in ns\n"
	if err := os.WriteFile(filepath.Join(dir, "proof.txt"), []byte(proof), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := statFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	shared := sizeBefore{v, "the mount is on the filesystem that holds /"}

	var na notApplicable
	err = grown(dir, shared, proof)
	if !errors.As(err, &na) {
		t.Fatalf("a directory of the host's filesystem: %v, want not applicable", err)
	}
	for _, want := range []string{"size not observable: the mount is on the filesystem that holds /", "data is intact", "--block-parameters"} {
		if !strings.Contains(na.reason, want) {
			t.Errorf("reason %q lacks %q", na.reason, want)
		}
	}

	if err := grown(dir, shared, "another proof\n"); err == nil || errors.As(err, &na) {
		t.Errorf("lost data on a directory volume: %v, want a failure", err)
	}

	own := sizeBefore{fsView: v}
	if err := grown(dir, own, proof); err == nil || errors.As(err, &na) || !strings.Contains(err.Error(), "after the expansion") {
		t.Errorf("a filesystem of the volume's own that did not grow: %v, want a failure", err)
	}
	own.size = v.size - growth
	if err := grown(dir, own, proof); err != nil {
		t.Errorf("a filesystem of the volume's own that grew: %v", err)
	}
}
