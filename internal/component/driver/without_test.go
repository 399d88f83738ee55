package driver_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

// Each capability switched off is neither advertised nor served, and what depends on it is
// refused, so a CO sees one consistent driver.
func TestWithoutCapabilities(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{Without: driver.WithoutNames})
	ctx := ctxT(t)
	pc, err := in.Identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pc.GetCapabilities() {
		if c.GetVolumeExpansion() != nil {
			t.Errorf("plugin capability %v advertised --without plugin-expansion", c)
		}
	}
	cc, err := in.Controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ctrl []csi.ControllerServiceCapability_RPC_Type
	for _, c := range cc.GetCapabilities() {
		ctrl = append(ctrl, c.GetRpc().GetType())
	}
	for _, off := range []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS} {
		if slices.Contains(ctrl, off) {
			t.Errorf("controller capability %v advertised while switched off", off)
		}
	}
	if !slices.Contains(ctrl, csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME) {
		t.Error("CREATE_DELETE_VOLUME is gone too")
	}
	nc, err := in.Node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range nc.GetCapabilities() {
		if c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
			t.Error("STAGE_UNSTAGE_VOLUME advertised --without staging")
		}
	}
	_, err = in.Controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
	wantCode(t, err, codes.Unimplemented, "ListVolumes")
	_, err = in.Controller.GetCapacity(ctx, &csi.GetCapacityRequest{})
	wantCode(t, err, codes.Unimplemented, "GetCapacity")
	_, err = in.Controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v"})
	wantCode(t, err, codes.Unimplemented, "CreateSnapshot")
	_, err = in.Controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: 1}})
	wantCode(t, err, codes.Unimplemented, "ControllerExpandVolume")
	_, err = in.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: "/x", VolumeCapability: mountCap("")})
	wantCode(t, err, codes.Unimplemented, "NodeStageVolume")
	req := createReq("raw", "block", 16<<20)
	req.VolumeCapabilities = []*csi.VolumeCapability{blockCap()}
	_, err = in.Controller.CreateVolume(ctx, req)
	wantCode(t, err, codes.InvalidArgument, "CreateVolume of raw block --without block")
	req = createReq("restored", "dir", 16<<20)
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s"}}}
	_, err = in.Controller.CreateVolume(ctx, req)
	wantCode(t, err, codes.InvalidArgument, "CreateVolume from a snapshot --without snapshots")
}

// Without staging, NodePublishVolume mounts the volume by itself and the last
// NodeUnpublishVolume releases it: nothing stays mounted, and the data persists.
func TestPublishWithoutStaging(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{Without: []string{driver.WithoutStaging, driver.WithoutControllerExpansion}})
	c := clients{ctrl: in.Controller, node: in.Node}
	for _, typ := range []string{"dir", "block"} {
		t.Run(typ, func(t *testing.T) {
			v := c.create(t, "v-"+typ, typ, 64<<20)
			target := in.Path("target-" + typ)
			c.publish(t, v.GetVolumeId(), "", target, mountCap(""))
			if err := os.WriteFile(filepath.Join(target, "f"), []byte("kept"), 0o644); err != nil {
				t.Fatal(err)
			}
			// A second publish of the same target is idempotent.
			c.publish(t, v.GetVolumeId(), "", target, mountCap(""))
			c.unpublish(t, v.GetVolumeId(), target)
			if mps, _ := mount.New("").List(); slices.ContainsFunc(mps, func(mp mount.MountPoint) bool { return filepath.Base(mp.Path) == v.GetVolumeId() }) {
				t.Errorf("the driver's own stage of %s is still mounted after the last unpublish", v.GetVolumeId())
			}
			c.publish(t, v.GetVolumeId(), "", target, mountCap(""))
			if got, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(got) != "kept" {
				t.Errorf("data after republish = %q, %v", got, err)
			}
			if typ == "dir" {
				// Node-only expansion: NodeExpandVolume grows the volume itself (a block
				// image's ext4 cannot grow online here: the e2e profile uses xfs).
				rsp, err := in.Node.NodeExpandVolume(ctxT(t), &csi.NodeExpandVolumeRequest{VolumeId: v.GetVolumeId(), VolumePath: target,
					CapacityRange: &csi.CapacityRange{RequiredBytes: 128 << 20}})
				if err != nil {
					t.Fatalf("NodeExpandVolume: %v", err)
				}
				if rsp.GetCapacityBytes() != 128<<20 {
					t.Errorf("NodeExpandVolume capacity = %d, want %d", rsp.GetCapacityBytes(), 128<<20)
				}
			}
			c.unpublish(t, v.GetVolumeId(), target)
			// The driver made its staging directory: it removes it, as the kubelet removes
			// the staging directories it makes.
			if _, err := os.Stat(filepath.Join(in.Config.StateDir, "publish-staging", v.GetVolumeId())); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the driver's own staging directory is left after the last unpublish: %v", err)
			}
			c.delete(t, v.GetVolumeId())
		})
	}
}

// A driver restarted while it holds its own stage (--without staging) keeps it, and the
// last unpublish after the restart still releases it.
func TestOwnStageSurvivesRestart(t *testing.T) {
	drivertest.RequireRoot(t)
	cfg := driver.Config{Without: []string{driver.WithoutStaging}}
	first := drivertest.Start(t, cfg)
	c := clients{ctrl: first.Controller, node: first.Node}
	v := c.create(t, "v", "block", 64<<20)
	target := first.Path("target")
	c.publish(t, v.GetVolumeId(), "", target, mountCap(""))
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = first.Config.StateDir
	second := drivertest.Start(t, cfg)
	c = clients{ctrl: second.Controller, node: second.Node}
	c.unpublish(t, v.GetVolumeId(), target)
	if mps, _ := mount.New("").List(); slices.ContainsFunc(mps, func(mp mount.MountPoint) bool { return strings.HasPrefix(mp.Path, first.Dir) }) {
		t.Errorf("mounts left under %s after the last unpublish", first.Dir)
	}
	c.delete(t, v.GetVolumeId())
}
