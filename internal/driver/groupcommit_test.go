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

	"github.com/kubevol/kubevol/internal/driver/backend"
)

// Concurrent CreateVolume calls share writes of controller.json (group commit): 64 calls
// cost two writes, none returns before its record is on disk, and a controller started
// afresh from the disk, as after a crash, has all 64.
func TestCreateVolumeGroupCommit(t *testing.T) {
	cfg := &Config{NodeID: "node-1", StateDir: t.TempDir()}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := newController(cfg, logr.Discard(), newInflight(), &backend.Loops{})
	if err != nil {
		t.Fatal(err)
	}
	const calls = 64
	var returned atomic.Int32
	var writes []int // changes per write; only the leader appends, one at a time
	c.commits.BeforeWrite = func(changes int) {
		writes = append(writes, changes)
		if len(writes) > 1 {
			return
		}
		// Hold the first write until every other call has made its change and waits; the
		// calls of a busy driver pile up behind an fsync in the same way.
		for {
			c.mu.Lock()
			n := len(c.st.Volumes)
			c.mu.Unlock()
			if n == calls {
				break
			}
			runtime.Gosched()
		}
		if n := returned.Load(); n > 0 {
			t.Errorf("%d CreateVolume calls returned before any record was written", n)
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
	if w > 2 || changes != calls {
		t.Errorf("%d writes covering %d changes for %d calls; want at most 2 writes covering all %d", w, changes, calls, calls)
	}

	// A crash now leaves exactly the disk: load it into a new controller, without any
	// shutdown of the first, and reconcile as a start does.
	again, err := newController(cfg, logr.Discard(), newInflight(), &backend.Loops{})
	if err != nil {
		t.Fatal(err)
	}
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
