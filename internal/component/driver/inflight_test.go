package driver

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
)

func TestInflightSharedAndExclusive(t *testing.T) {
	f := newInflight()
	r1, err := f.hold(nil, []string{"v"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := f.hold([]string{"other"}, []string{"v"})
	if err != nil {
		t.Fatalf("a second shared hold: %v", err)
	}
	if _, err := f.acquire("v"); status.Code(err) != codes.Aborted {
		t.Fatalf("exclusive while shared: %v, want ABORTED", err)
	}
	r1()
	if _, err := f.acquire("v"); status.Code(err) != codes.Aborted {
		t.Fatalf("exclusive while one share is left: %v, want ABORTED", err)
	}
	r2()
	r3, err := f.acquire("v", "other")
	if err != nil {
		t.Fatalf("exclusive once every share is released: %v", err)
	}
	if _, err := f.hold(nil, []string{"v"}); status.Code(err) != codes.Aborted {
		t.Fatalf("shared while exclusive: %v, want ABORTED", err)
	}
	r3()
	if len(f.busy) != 0 {
		t.Errorf("keys left after every release: %v", f.busy)
	}
}

// heldCopy is a backend whose copies (CreateVolume from a source) wait for release.
type heldCopy struct {
	backend.Backend
	copying chan struct{}
	release chan struct{}
}

func (h *heldCopy) CreateVolume(id string, size int64, fromPath string) error {
	if fromPath != "" {
		close(h.copying)
		<-h.release
	}
	return h.Backend.CreateVolume(id, size, fromPath)
}

// While a clone reads its source, the source's attach record still changes: a detach
// refused then makes the attach/detach controller wait minutes for the next attach (a pod
// using a volume and its fresh clone at once, as upstream's multiVolume suite does). What
// changes the source's bytes or removes it still waits for the copy.
func TestCopyLeavesAttachRecordFree(t *testing.T) {
	cfg := &Config{NodeID: "node-1", StateDir: t.TempDir(), AttachRequired: true}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := testController(t, cfg)
	held := &heldCopy{Backend: c.backends["dir"], copying: make(chan struct{}), release: make(chan struct{})}
	c.backends["dir"] = held
	ctx := context.Background()
	vc := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	}
	src, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "src", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{vc}, Parameters: map[string]string{"type": "dir"}})
	if err != nil {
		t.Fatal(err)
	}
	id := src.GetVolume().GetVolumeId()
	cloned := make(chan error, 1)
	go func() {
		_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "clone", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
			VolumeCapabilities: []*csi.VolumeCapability{vc}, Parameters: map[string]string{"type": "dir"},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}})
		cloned <- err
	}()
	select {
	case <-held.copying:
	case err := <-cloned:
		t.Fatalf("the clone returned before its copy: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the clone never started its copy")
	}
	defer func() {
		close(held.release)
		if err := <-cloned; err != nil {
			t.Errorf("clone: %v", err)
		}
	}()
	if _, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: vc}); err != nil {
		t.Errorf("ControllerPublishVolume of the source during its copy: %v", err)
	}
	if _, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-1"}); err != nil {
		t.Errorf("ControllerUnpublishVolume of the source during its copy: %v", err)
	}
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); status.Code(err) != codes.Aborted {
		t.Errorf("DeleteVolume of the source during its copy: %v, want ABORTED", err)
	}
	if _, err := c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}}); status.Code(err) != codes.Aborted {
		t.Errorf("ControllerExpandVolume of the source during its copy: %v, want ABORTED", err)
	}
}
