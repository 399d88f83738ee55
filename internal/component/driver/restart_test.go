package driver_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// TestRestartAfterKill creates volumes and snapshots, stages and publishes them, kills the
// driver process with SIGKILL, takes some mounts away as a reboot would, restarts the
// driver and checks that every record survived with the same IDs, that the lost mounts were
// repaired without reformatting, and that a full teardown leaves nothing behind.
func TestRestartAfterKill(t *testing.T) {
	k := newKillable(t, true)
	dir, cfg := k.dir, k.cfg
	child := k.start(t)
	c := clients{ctrl: child.Controller, node: child.Node}

	type vol struct {
		name, typ string
		vc        *csi.VolumeCapability
		id        string
		staging   string
		target    string
	}
	vols := []*vol{
		{name: "dir", typ: "dir", vc: mountCap("")},
		{name: "ext4", typ: "block", vc: mountCap("ext4")},
		{name: "xfs", typ: "block", vc: mountCap("xfs")},
		{name: "raw", typ: "block", vc: blockCap()},
	}
	for _, v := range vols {
		v.id = c.create(t, v.name, v.typ, 320<<20).GetVolumeId()
		v.staging, v.target = filepath.Join(dir, "staging", v.name), filepath.Join(dir, "pods", v.name, "mount")
		if _, err := c.ctrl.ControllerPublishVolume(ctxT(t), &csi.ControllerPublishVolumeRequest{VolumeId: v.id, NodeId: "node-1", VolumeCapability: v.vc}); err != nil {
			t.Fatal(err)
		}
		c.stage(t, v.id, v.staging, v.vc)
		c.publish(t, v.id, v.staging, v.target, v.vc)
		if v.vc.GetMount() != nil {
			if err := os.WriteFile(filepath.Join(v.target, "data"), []byte(v.name), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var snaps []string
	for _, v := range vols[:2] {
		resp, err := c.ctrl.CreateSnapshot(ctxT(t), &csi.CreateSnapshotRequest{Name: "snap-" + v.name, SourceVolumeId: v.id})
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, resp.GetSnapshot().GetSnapshotId())
	}

	child.Kill()
	// Take the ext4 volume's mounts and loop device away, as a reboot would.
	ext4 := vols[1]
	for _, p := range []string{ext4.target, ext4.staging} {
		if out, err := exec.Command("umount", p).CombinedOutput(); err != nil {
			t.Fatalf("umount %s: %v %s", p, err, out)
		}
	}
	dev, err := (&backend.Loops{}).Find(ctxT(t), filepath.Join(cfg.StateDir, "volumes", ext4.id+".img"))
	if err != nil || dev == "" {
		t.Fatalf("loop device of %s: %q %v", ext4.id, dev, err)
	}
	if err := (&backend.Loops{}).Detach(ctxT(t), dev); err != nil {
		t.Fatal(err)
	}

	child = k.start(t)
	c = clients{ctrl: child.Controller, node: child.Node}
	list, err := c.ctrl.ListVolumes(ctxT(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range list.GetEntries() {
		ids = append(ids, e.GetVolume().GetVolumeId())
		if got := e.GetStatus().GetPublishedNodeIds(); !slices.Equal(got, []string{"node-1"}) {
			t.Errorf("volume %s published to %v after restart, want [node-1]", e.GetVolume().GetVolumeId(), got)
		}
	}
	for _, v := range vols {
		if !slices.Contains(ids, v.id) {
			t.Errorf("volume %s (%s) lost across the restart; have %v", v.name, v.id, ids)
		}
	}
	sl, err := c.ctrl.ListSnapshots(ctxT(t), &csi.ListSnapshotsRequest{})
	if err != nil || len(sl.GetEntries()) != len(snaps) {
		t.Fatalf("snapshots after restart: %v, %v", sl.GetEntries(), err)
	}
	for _, v := range vols {
		if v.vc.GetMount() == nil {
			continue
		}
		got, err := os.ReadFile(filepath.Join(v.target, "data"))
		if err != nil || string(got) != v.name {
			t.Errorf("volume %s after restart: read %q, %v (want the data written before the kill)", v.name, got, err)
		}
	}
	if _, err := os.Stat(vols[3].target); err != nil {
		t.Errorf("raw block target: %v", err)
	}

	for _, v := range vols {
		c.unpublish(t, v.id, v.target)
		c.unstage(t, v.id, v.staging)
		if _, err := c.ctrl.ControllerUnpublishVolume(ctxT(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: v.id, NodeId: "node-1"}); err != nil {
			t.Fatal(err)
		}
		c.delete(t, v.id)
	}
	for _, id := range snaps {
		if _, err := c.ctrl.DeleteSnapshot(ctxT(t), &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
			t.Fatal(err)
		}
	}
	left, err := drivertest.Leftovers(dir)
	if err != nil || len(left) > 0 {
		t.Errorf("left behind after teardown: %v %v", left, err)
	}
	for _, sub := range []string{"volumes", "snapshots"} {
		if des, _ := os.ReadDir(filepath.Join(cfg.StateDir, sub)); len(des) > 0 {
			t.Errorf("%s not empty after teardown: %v", sub, des)
		}
	}
}

// A DeleteVolume killed after it marked the record and removed some or all of the bytes is
// finished by the next start: no record without data, no data without record.
func TestRestartFinishesInterruptedDelete(t *testing.T) {
	k := newKillable(t, false)
	cfg := k.cfg
	child := k.start(t)
	c := clients{ctrl: child.Controller, node: child.Node}
	gone := c.create(t, "data-gone", "dir", 1<<20).GetVolumeId()
	kept := c.create(t, "data-kept", "dir", 1<<20).GetVolumeId()
	child.Kill()

	// What a kill inside DeleteVolume leaves: both marked deleting, one with its bytes
	// already removed.
	file := state.NewFile(filepath.Join(cfg.StateDir, "controller.json"))
	st := state.NewController()
	if _, err := file.Load(st); err != nil {
		t.Fatal(err)
	}
	st.Volumes[gone].Deleting, st.Volumes[kept].Deleting = true, true
	if err := file.Save(st); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.StateDir, "volumes", gone)); err != nil {
		t.Fatal(err)
	}

	child = k.start(t)
	rsp, err := child.Controller.ListVolumes(ctxT(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rsp.GetEntries()); n != 0 {
		t.Errorf("%d volumes listed after the restart, want the two interrupted deletions finished", n)
	}
	entries, _ := os.ReadDir(filepath.Join(cfg.StateDir, "volumes"))
	for _, e := range entries {
		t.Errorf("volume data %s left after the interrupted deletion was finished", e.Name())
	}
}
