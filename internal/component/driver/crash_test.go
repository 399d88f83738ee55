package driver_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// TestKillDuringOperations kills the driver with SIGKILL while creates, deletes, stages and
// publishes are in flight, at a different moment each round, then restarts it and checks
// that the disk and the records agree: no volume lost, no data, loop device or mount that
// no record explains. The rounds are bounded in number and time.
func TestKillDuringOperations(t *testing.T) {
	k := newKillable(t, false)
	dir, cfg := k.dir, k.cfg
	for round := range 4 {
		child := k.start(t)
		checkConsistent(t, dir, cfg.StateDir)
		c := clients{ctrl: child.Controller, node: child.Node}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				churn(ctx, c, dir, fmt.Sprintf("r%d-w%d", round, w), w%2 == 1)
			}()
		}
		// How long the churn runs before the kill, varied by round so that the kill lands
		// at different points of the operations: nothing is awaited.
		time.Sleep(time.Duration(150+round*120) * time.Millisecond)
		child.Kill()
		cancel()
		wg.Wait()
	}
	child := k.start(t)
	checkConsistent(t, dir, cfg.StateDir)
	child.Kill()
}

// killable is a driver child process on a socket in a test directory, restarted after each
// kill -9 with the same state: what the kill and restart tests share.
type killable struct {
	dir, endpoint string
	cfg           driver.Config
}

func newKillable(t *testing.T, attachRequired bool) *killable {
	t.Helper()
	drivertest.RequireRoot(t)
	dir := drivertest.TempDir(t)
	return &killable{dir: dir, endpoint: "unix://" + filepath.Join(dir, "csi.sock"),
		cfg: driver.Config{NodeID: "node-1", StateDir: filepath.Join(dir, "state"), AttachRequired: attachRequired}}
}

func (k *killable) start(t *testing.T) *drivertest.Child {
	t.Helper()
	return drivertest.StartChild(t, k.endpoint, k.cfg)
}

// churn creates, stages, publishes and tears down volumes until ctx ends or the driver dies.
func churn(ctx context.Context, c clients, dir, prefix string, block bool) {
	typ, vc := "dir", mountCap("")
	if block {
		typ = "block"
	}
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		resp, err := c.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20},
			VolumeCapabilities: []*csi.VolumeCapability{vc}, Parameters: map[string]string{"type": typ}})
		if err != nil {
			return
		}
		id := resp.GetVolume().GetVolumeId()
		staging, target := filepath.Join(dir, "staging", name), filepath.Join(dir, "pods", name)
		steps := []func() error{
			func() error {
				_, err := c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: vc})
				return err
			},
			func() error {
				_, err := c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc})
				return err
			},
		}
		if i%2 == 0 { // every other volume is torn down again; the rest stay for the restart
			steps = append(steps,
				func() error {
					_, err := c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
					return err
				},
				func() error {
					_, err := c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
					return err
				},
				func() error {
					_, err := c.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
					return err
				})
		}
		for _, step := range steps {
			if step() != nil {
				return
			}
		}
	}
}

// checkConsistent compares the records with the disk, the loop devices and the mounts.
func checkConsistent(t *testing.T, dir, stateDir string) {
	t.Helper()
	ctrl := state.NewController()
	if _, err := state.NewFile(filepath.Join(stateDir, "controller.json")).Load(ctrl); err != nil {
		t.Fatal(err)
	}
	ctrl.Normalize()
	node := state.NewNode()
	if _, err := state.NewFile(filepath.Join(stateDir, "node.json")).Load(node); err != nil {
		t.Fatal(err)
	}
	node.Normalize()
	entries, err := backend.Scan(filepath.Join(stateDir, "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, e := range entries {
		if e.Partial {
			t.Errorf("partial copy %s survived a restart", e.Path)
		}
		onDisk[e.ID] = true
		if ctrl.Volumes[e.ID] == nil {
			t.Errorf("volume data %s has no record: leaked", e.Path)
		}
	}
	for id := range ctrl.Volumes {
		if !onDisk[id] {
			t.Errorf("volume %s is recorded but its data is gone: lost", id)
		}
	}
	devices := map[string]bool{}
	for id, s := range node.Stages {
		if s.Phase != state.PhaseDone {
			t.Errorf("stage of %s left in phase %s", id, s.Phase)
		}
		devices[s.Device] = true
	}
	mounts := map[string]bool{}
	for p, pub := range node.Publishes {
		if pub.Phase != state.PhaseDone {
			t.Errorf("publish at %s left in phase %s", p, pub.Phase)
		}
		mounts[p] = true
	}
	for _, s := range node.Stages {
		if !s.Block {
			mounts[s.StagingPath] = true
		}
	}
	left, err := drivertest.Leftovers(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after restart: %d volumes, %d stages, %d publishes, %d mounts and loop devices", len(ctrl.Volumes), len(node.Stages), len(node.Publishes), len(left))
	for _, l := range left {
		var kind, what, rest string
		fmt.Sscan(l, &kind, &what, &rest)
		if (kind == "mount" && !mounts[what]) || (kind == "loop" && !devices[what]) {
			t.Errorf("%s is held but no record explains it", l)
		}
	}
}

// TestKillAfterConcurrentCreates checks group commit against a real crash: every
// CreateVolume of 64 concurrent ones that returned is still there after SIGKILL and a
// restart, with its data.
func TestKillAfterConcurrentCreates(t *testing.T) {
	k := newKillable(t, false)
	dir, cfg := k.dir, k.cfg
	child := k.start(t)
	const calls = 64
	ids := make([]string, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := child.Controller.CreateVolume(ctxT(t), createReq(fmt.Sprintf("pvc-%d", i), "dir", 1<<20))
			if err != nil {
				t.Errorf("CreateVolume pvc-%d: %v", i, err)
				return
			}
			ids[i] = resp.GetVolume().GetVolumeId()
		}()
	}
	wg.Wait()
	child.Kill()

	child = k.start(t)
	list, err := child.Controller.ListVolumes(ctxT(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range list.GetEntries() {
		have[e.GetVolume().GetVolumeId()] = true
	}
	for i, id := range ids {
		if !have[id] {
			t.Errorf("volume %s of pvc-%d lost across SIGKILL", id, i)
		}
	}
	if len(have) != calls {
		t.Errorf("%d volumes after the restart, want %d", len(have), calls)
	}
	checkConsistent(t, dir, cfg.StateDir)
}
