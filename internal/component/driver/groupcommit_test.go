package driver

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// Concurrent CreateVolume calls share writes of controller.json (group commit): each call
// makes two changes, its intent before the data and its completion after, and 64 calls
// cost four writes; none returns before its record is on disk, and a controller started
// afresh from the disk, as after a crash, has all 64.
func TestCreateVolumeGroupCommit(t *testing.T) {
	cfg := &Config{NodeID: "node-1", StateDir: t.TempDir()}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := testController(t, cfg)
	const calls = 64
	var returned atomic.Int32
	var writes []int // changes per write; only the leader appends, one at a time
	c.commits.BeforeWrite = func(changes int) {
		writes = append(writes, changes)
		// Hold the first write of each kind of change until every other call has made
		// its change and waits; the calls of a busy driver pile up behind an fsync in the
		// same way.
		switch len(writes) {
		case 1:
			waitVolumes(c, calls, func(*state.Volume) bool { return true })
			if n := returned.Load(); n > 0 {
				t.Errorf("%d CreateVolume calls returned before any record was written", n)
			}
		case 3:
			waitVolumes(c, calls, func(v *state.Volume) bool { return !v.Creating })
		}
	}
	ids := make([]string, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
				Name:               fmt.Sprintf("pvc-%d", i),
				CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 20},
				VolumeCapabilities: []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}, AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}},
			})
			returned.Add(1)
			if err != nil {
				t.Errorf("CreateVolume pvc-%d: %v", i, err)
				return
			}
			ids[i] = resp.GetVolume().GetVolumeId()
		}()
	}
	wg.Wait()
	w, changes := c.commits.Writes()
	t.Logf("%d CreateVolume calls, %d writes covering %v changes", calls, w, writes)
	if w > 4 || changes != 2*calls {
		t.Errorf("%d writes covering %d changes for %d calls; want at most 4 writes covering all %d", w, changes, calls, 2*calls)
	}

	// A crash now leaves exactly the disk: load it into a new controller, without any
	// shutdown of the first, and reconcile as a start does.
	again := testController(t, cfg)
	if err := again.reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		v := again.volume(id)
		if v == nil || v.Name != fmt.Sprintf("pvc-%d", i) {
			t.Errorf("volume %s of pvc-%d after reload: %+v", id, i, v)
			continue
		}
		if _, err := os.Stat(again.backends[v.Type].VolumePath(id)); err != nil {
			t.Errorf("volume %s: data after reload: %v", id, err)
		}
	}
}

// waitVolumes returns once n volume records satisfy ok.
func waitVolumes(c *controller, n int, ok func(*state.Volume) bool) {
	for {
		c.mu.Lock()
		have := 0
		for _, v := range c.st.Volumes {
			if ok(v) {
				have++
			}
		}
		c.mu.Unlock()
		if have == n {
			return
		}
		runtime.Gosched()
	}
}

// testController opens a controller on cfg's state directory as New does.
func testController(t *testing.T, cfg *Config) *controller {
	t.Helper()
	cu, err := claimStateDir(cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	c, err := newController(cfg, logr.Discard(), newInflight(), &backend.Loops{}, &pool{capacity: cfg.Capacity, fsPath: cfg.StateDir}, cu)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
