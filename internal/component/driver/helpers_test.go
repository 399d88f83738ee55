package driver_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver"
)

// clients is what the tests drive, in process or in a child.
type clients struct {
	ctrl csi.ControllerClient
	node csi.NodeClient
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mountCap(fsType string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
}

// createReq asks for a volume of one backend type with a mount capability.
func createReq(name, typ string, size int64) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap("")},
		Parameters:         map[string]string{"type": typ},
	}
}

func (c clients) create(t testing.TB, name, typ string, size int64) *csi.Volume {
	t.Helper()
	resp, err := c.ctrl.CreateVolume(ctxT(t), createReq(name, typ, size))
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return resp.GetVolume()
}

func (c clients) stage(t testing.TB, id, path string, vc *csi.VolumeCapability) {
	t.Helper()
	if _, err := c.node.NodeStageVolume(ctxT(t), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: path, VolumeCapability: vc}); err != nil {
		t.Fatalf("NodeStageVolume %s: %v", id, err)
	}
}

func (c clients) publish(t testing.TB, id, staging, target string, vc *csi.VolumeCapability) {
	t.Helper()
	if _, err := c.node.NodePublishVolume(ctxT(t), &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc}); err != nil {
		t.Fatalf("NodePublishVolume %s: %v", id, err)
	}
}

func (c clients) unpublish(t testing.TB, id, target string) {
	t.Helper()
	if _, err := c.node.NodeUnpublishVolume(ctxT(t), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume %s: %v", id, err)
	}
}

// retryAborted calls f until it answers something else than ABORTED (another operation on
// the volume in progress), as a CO does, for at most 20 s; anything but success fails t.
func retryAborted(t testing.TB, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			return
		}
		time.Sleep(50 * time.Millisecond) // a CO's retry interval: the call is made again, nothing is awaited
	}
}

func (c clients) unstage(t testing.TB, id, path string) {
	t.Helper()
	if _, err := c.node.NodeUnstageVolume(ctxT(t), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: path}); err != nil {
		t.Fatalf("NodeUnstageVolume %s: %v", id, err)
	}
}

// delete deletes the volume, retrying FAILED_PRECONDITION for up to 30 s as a CO does: a
// block volume's loop device that something else on the machine still held open at the
// unstage (another cluster's containers, on a busy CI machine) detaches only when that
// holder lets go, and until then the driver rightly refuses to delete its image.
func (c clients) delete(t testing.TB, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.ctrl.DeleteVolume(ctxT(t), &csi.DeleteVolumeRequest{VolumeId: id})
		if err == nil {
			return
		}
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			t.Fatalf("DeleteVolume %s: %v", id, err)
		}
		time.Sleep(200 * time.Millisecond) // a CO's retry interval: the call is made again, nothing is awaited
	}
}

func wantCode(t testing.TB, err error, want codes.Code, what string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: got %v (%v), want %v", what, got, err, want)
	}
}

// scrape returns the driver's /metrics page.
func scrape(t testing.TB, d *driver.Driver) string {
	t.Helper()
	rec := httptest.NewRecorder()
	d.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}
