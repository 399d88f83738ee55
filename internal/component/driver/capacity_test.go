package driver_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

func TestCapacityExhaustion(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{Capacity: 100 << 20})
	c := clients{ctrl: in.Controller, node: in.Node}
	capacity := func(typ string) int64 {
		resp, err := c.ctrl.GetCapacity(ctxT(t), &csi.GetCapacityRequest{Parameters: map[string]string{"type": typ}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetAvailableCapacity()
	}
	if got := capacity("dir"); got != 100<<20 {
		t.Fatalf("GetCapacity of an empty pool: %d, want %d", got, 100<<20)
	}
	first := c.create(t, "first", "dir", 60<<20)
	if got := capacity("dir"); got != 40<<20 {
		t.Fatalf("GetCapacity after 60 MiB: %d, want %d", got, 40<<20)
	}
	_, err := c.ctrl.CreateVolume(ctxT(t), &csi.CreateVolumeRequest{Name: "second", CapacityRange: &csi.CapacityRange{RequiredBytes: 60 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap("")}})
	wantCode(t, err, codes.ResourceExhausted, "CreateVolume beyond the pool")
	_, err = c.ctrl.ControllerExpandVolume(ctxT(t), &csi.ControllerExpandVolumeRequest{VolumeId: first.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 120 << 20}})
	wantCode(t, err, codes.ResourceExhausted, "ControllerExpandVolume beyond the pool")
	_, err = c.ctrl.CreateVolume(ctxT(t), &csi.CreateVolumeRequest{Name: "range", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20, LimitBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap("")}})
	wantCode(t, err, codes.OutOfRange, "CreateVolume with required > limit")
	// Real space for block: no host filesystem here has an exbibyte free.
	_, err = c.ctrl.CreateVolume(ctxT(t), &csi.CreateVolumeRequest{Name: "huge", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 60},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap("")}, Parameters: map[string]string{"type": "block"}})
	wantCode(t, err, codes.ResourceExhausted, "block CreateVolume beyond the host filesystem")
	// Another node's segment has no capacity.
	resp, err := c.ctrl.GetCapacity(ctxT(t), &csi.GetCapacityRequest{AccessibleTopology: &csi.Topology{Segments: map[string]string{driver.TopologyKey: "other"}}})
	if err != nil || resp.GetAvailableCapacity() != 0 {
		t.Fatalf("GetCapacity of another node: %v %v", resp, err)
	}
	c.delete(t, first.GetVolumeId())
	c.create(t, "second", "dir", 60<<20)
}

// TestConcurrentCreate sends 200 CreateVolume calls at once, 50 of them repeating a name
// another call uses. A CO retries ABORTED with backoff (CSI "Concurrency"), and so do these
// callers. Every name must end with exactly one volume, both callers of a name must get the
// same one, and no volume may exist that no name explains.
func TestConcurrentCreate(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	const unique, dup = 150, 50
	names := make([]string, 0, unique+dup)
	for i := range unique {
		names = append(names, fmt.Sprintf("pvc-%03d", i))
	}
	for i := range dup {
		names = append(names, fmt.Sprintf("pvc-%03d", i*3))
	}
	ids := make([]string, len(names))
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; ; attempt++ {
				resp, err := in.Controller.CreateVolume(ctxT(t), &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
					VolumeCapabilities: []*csi.VolumeCapability{mountCap("")}})
				if status.Code(err) == codes.Aborted && attempt < 100 {
					time.Sleep(time.Duration(attempt+1) * time.Millisecond) // a CO's retry backoff, not a wait for a result
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
				ids[i] = resp.GetVolume().GetVolumeId()
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	byName := map[string]string{}
	for i, name := range names {
		if prev, ok := byName[name]; ok && prev != ids[i] {
			t.Errorf("name %s got two volumes: %s and %s", name, prev, ids[i])
		}
		byName[name] = ids[i]
	}
	list, err := in.Controller.ListVolumes(ctxT(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, e := range list.GetEntries() {
		listed = append(listed, e.GetVolume().GetVolumeId())
	}
	if len(listed) != unique {
		t.Errorf("%d volumes exist, want %d", len(listed), unique)
	}
	for name, id := range byName {
		if !slices.Contains(listed, id) {
			t.Errorf("volume %s of %s is not listed: lost", id, name)
		}
	}
}
