package driver_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// TestStateDiskFull puts the driver's state directory on a small tmpfs and fills it: every
// call that must write a record or copy data fails with RESOURCE_EXHAUSTED, the records on
// disk stay whole and say exactly what they said before (read back and decoded after each
// failure), a kill -9 while full leaves loadable records, a restart on the full disk
// serves them, and once space returns the same driver serves again with every record
// intact.
func TestStateDiskFull(t *testing.T) {
	k := newKillable(t, false)
	// The tmpfs lives outside the test directory, whose mounts the final check counts.
	k.cfg.StateDir = filepath.Join(drivertest.TempDir(t), "state")
	dir, stateDir := k.dir, k.cfg.StateDir
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Released by the cleanup of the test directory, after the driver is killed.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", stateDir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	child := k.start(t)
	c := clients{ctrl: child.Controller, node: child.Node}

	vc := mountCap("")
	ids := map[string]string{} // name → volume ID of what was created while there was space
	for i := range 3 {
		name := fmt.Sprintf("before-%d", i)
		ids[name] = c.create(t, name, "dir", 1<<20).GetVolumeId()
	}
	staging, target := filepath.Join(dir, "staging", "before-0"), filepath.Join(dir, "pods", "before-0")
	c.stage(t, ids["before-0"], staging, vc)
	c.publish(t, ids["before-0"], staging, target, vc)
	// Data to copy, for the snapshot that will not fit.
	if err := os.WriteFile(filepath.Join(target, "data"), bytes.Repeat([]byte("x"), 512<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	wantVolumes := slices.Sorted(maps.Values(ids))
	ctrlRecords := loadRecords(t, stateDir)
	nodeRecords := readFile(t, filepath.Join(stateDir, "node.json"))

	filler := fill(t, stateDir)

	// Each refused call leaves the records as they were, byte for byte.
	checkUnchanged := func(what string) {
		t.Helper()
		if got := loadRecords(t, stateDir); !bytes.Equal(got, ctrlRecords) {
			t.Errorf("after %s: controller.json changed:\n%s\nwas:\n%s", what, got, ctrlRecords)
		}
		if got := readFile(t, filepath.Join(stateDir, "node.json")); !bytes.Equal(got, nodeRecords) {
			t.Errorf("after %s: node.json changed:\n%s\nwas:\n%s", what, got, nodeRecords)
		}
		decodeNode(t, stateDir)
	}
	full := []struct {
		what string
		call func() error
	}{
		{"CreateVolume", func() error {
			_, err := c.ctrl.CreateVolume(ctxT(t), createReq("during-full", "dir", 1<<20))
			return err
		}},
		{"CreateVolume of a block volume", func() error {
			_, err := c.ctrl.CreateVolume(ctxT(t), createReq("during-full-block", "block", 16<<20))
			return err
		}},
		{"CreateSnapshot", func() error {
			_, err := c.ctrl.CreateSnapshot(ctxT(t), &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: ids["before-0"]})
			return err
		}},
		{"CreateVolume from a volume", func() error {
			req := createReq("clone", "dir", 1<<20)
			req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: ids["before-0"]}}}
			_, err := c.ctrl.CreateVolume(ctxT(t), req)
			return err
		}},
		{"DeleteVolume", func() error {
			_, err := c.ctrl.DeleteVolume(ctxT(t), &csi.DeleteVolumeRequest{VolumeId: ids["before-1"]})
			return err
		}},
		{"NodeStageVolume", func() error {
			_, err := c.node.NodeStageVolume(ctxT(t), &csi.NodeStageVolumeRequest{VolumeId: ids["before-2"], StagingTargetPath: filepath.Join(dir, "staging", "before-2"), VolumeCapability: vc})
			return err
		}},
	}
	for _, f := range full {
		if err := f.call(); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s on a full disk: %v, want RESOURCE_EXHAUSTED", f.what, err)
		}
		checkUnchanged(f.what)
	}

	// kill -9 with writes in flight on the full disk: what is left loads.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.ctrl.CreateVolume(ctxT(t), createReq(fmt.Sprintf("killed-%d", i), "dir", 1<<20))
		}()
	}
	child.Kill()
	wg.Wait()
	checkUnchanged("kill -9 while full")

	// Restarted on the still full disk, the driver starts and serves what it has.
	child = k.start(t)
	c = clients{ctrl: child.Controller, node: child.Node}
	checkVolumes(t, c, wantVolumes, "restarted while full")
	if _, err := c.ctrl.CreateVolume(ctxT(t), createReq("during-full", "dir", 1<<20)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("CreateVolume on a full disk after a restart: %v, want RESOURCE_EXHAUSTED", err)
	}
	checkUnchanged("restart while full")

	// Space returns: the same driver serves again, with every record.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	checkVolumes(t, c, wantVolumes, "space returned")
	after := c.create(t, "after", "dir", 1<<20).GetVolumeId()
	if _, err := c.ctrl.CreateSnapshot(ctxT(t), &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: ids["before-0"]}); err != nil {
		t.Errorf("CreateSnapshot once space returned: %v", err)
	}
	c.stage(t, ids["before-2"], filepath.Join(dir, "staging", "before-2"), vc)
	data, err := os.ReadFile(filepath.Join(target, "data"))
	if err != nil || len(data) != 512<<10 {
		t.Errorf("data of before-0 after the disk was full: %d bytes, %v", len(data), err)
	}

	// Teardown leaves nothing but the records of the snapshot's deletion.
	c.unpublish(t, ids["before-0"], target)
	c.unstage(t, ids["before-0"], staging)
	c.unstage(t, ids["before-2"], filepath.Join(dir, "staging", "before-2"))
	for _, id := range append(wantVolumes, after) {
		c.delete(t, id)
	}
	snaps, err := c.ctrl.ListSnapshots(ctxT(t), &csi.ListSnapshotsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps.GetEntries() {
		if _, err := c.ctrl.DeleteSnapshot(ctxT(t), &csi.DeleteSnapshotRequest{SnapshotId: s.GetSnapshot().GetSnapshotId()}); err != nil {
			t.Error(err)
		}
	}
	checkConsistent(t, dir, stateDir)
}

func checkVolumes(t *testing.T, c clients, want []string, when string) {
	t.Helper()
	list, err := c.ctrl.ListVolumes(ctxT(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatalf("ListVolumes, %s: %v", when, err)
	}
	var have []string
	for _, e := range list.GetEntries() {
		have = append(have, e.GetVolume().GetVolumeId())
	}
	if slices.Sort(have); !slices.Equal(have, want) {
		t.Errorf("volumes, %s: %v, want %v", when, have, want)
	}
}

// fill writes a file into dir until the filesystem is full and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// A page-sized remainder may still fit; take it too.
	for {
		if _, err := f.Write(chunk[:512]); err != nil {
			break
		}
	}
	return path
}

// loadRecords reads controller.json, fails the test unless it decodes, and returns it.
func loadRecords(t *testing.T, stateDir string) []byte {
	t.Helper()
	path := filepath.Join(stateDir, "controller.json")
	data := readFile(t, path)
	if found, err := state.NewFile(path).Load(state.NewController()); err != nil || !found {
		t.Fatalf("controller.json does not load (found %v): %v\n%q", found, err, data)
	}
	return data
}

func decodeNode(t *testing.T, stateDir string) {
	t.Helper()
	path := filepath.Join(stateDir, "node.json")
	if _, err := state.NewFile(path).Load(state.NewNode()); err != nil {
		t.Fatalf("node.json does not load: %v", err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
