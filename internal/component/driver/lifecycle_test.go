package driver_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
)

func fsSize(t *testing.T, p string) int64 {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs(p, &fs); err != nil {
		t.Fatal(err)
	}
	return int64(fs.Blocks) * fs.Bsize
}

// hasCapSysResource reports whether this process may grow a mounted ext4: the kernel's
// EXT4_IOC_RESIZE_FS demands CAP_SYS_RESOURCE, which some sandboxes drop even for root.
func hasCapSysResource(t *testing.T) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
}

// TestExpandOnline grows a published volume: ControllerExpandVolume lengthens the image,
// NodeExpandVolume refreshes the loop device and grows the mounted filesystem.
func TestExpandOnline(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	c := clients{ctrl: in.Controller, node: in.Node}
	for _, fsType := range []string{"xfs", "ext4"} {
		t.Run(fsType, func(t *testing.T) {
			// The kernel lets only CAP_SYS_RESOURCE grow a mounted ext4; some sandboxes drop
			// it even for root. There the driver must fail cleanly and leave the volume as it
			// was, which is asserted instead.
			canGrow := fsType != "ext4" || hasCapSysResource(t)
			id := c.create(t, "online-"+fsType, "block", 320<<20).GetVolumeId()
			staging, target := in.Path("staging", fsType), in.Path("pods", fsType)
			c.stage(t, id, staging, mountCap(fsType))
			c.publish(t, id, staging, target, mountCap(fsType))
			before := fsSize(t, target)
			controllerExpand(t, c, id, 960<<20)
			_, err := c.node.NodeExpandVolume(ctxT(t), &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target, CapacityRange: &csi.CapacityRange{RequiredBytes: 960 << 20}})
			switch {
			case canGrow && err != nil:
				t.Fatal(err)
			case canGrow:
				if after := fsSize(t, target); after < before*2 {
					t.Errorf("filesystem %d bytes before, %d after", before, after)
				}
			default:
				t.Logf("no CAP_SYS_RESOURCE: checking that online ext4 growth fails cleanly")
				wantCode(t, err, codes.Internal, "NodeExpandVolume of a mounted ext4 without CAP_SYS_RESOURCE")
				if err != nil && !strings.Contains(err.Error(), "grow filesystem") {
					t.Errorf("error %q does not say the filesystem could not grow", err)
				}
				if after := fsSize(t, target); after != before {
					t.Errorf("filesystem changed from %d to %d bytes by a failed expansion", before, after)
				}
			}
			_, err = c.node.NodeExpandVolume(ctxT(t), &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}})
			wantCode(t, err, codes.OutOfRange, "NodeExpandVolume beyond the controller's size")
			c.unpublish(t, id, target)
			c.unstage(t, id, staging)
			c.delete(t, id)
		})
	}
}

// TestExpandOffline grows a volume that is not staged: the next NodeStageVolume grows the
// filesystem, ext4 before it mounts it (without CAP_SYS_RESOURCE, and by far more than an
// online resize can: 16 MiB to 1 GiB, as a small snapshot restored into a large claim).
func TestExpandOffline(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	c := clients{ctrl: in.Controller, node: in.Node}
	for _, tc := range []struct {
		fsType   string
		from, to int64
	}{{"xfs", 320 << 20, 960 << 20}, {"ext4", 16 << 20, 1 << 30}} {
		t.Run(tc.fsType, func(t *testing.T) {
			id := c.create(t, "offline-"+tc.fsType, "block", tc.from).GetVolumeId()
			staging := in.Path("staging", tc.fsType)
			c.stage(t, id, staging, mountCap(tc.fsType))
			if err := os.WriteFile(filepath.Join(staging, "keep"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := fsSize(t, staging)
			c.unstage(t, id, staging)
			controllerExpand(t, c, id, tc.to)
			c.stage(t, id, staging, mountCap(tc.fsType))
			if after := fsSize(t, staging); after < before*2 || after < tc.to*8/10 {
				t.Errorf("filesystem %d bytes before, %d after restage to a %d-byte volume", before, after, tc.to)
			}
			if _, err := os.Stat(filepath.Join(staging, "keep")); err != nil {
				t.Errorf("data lost across the offline growth: %v", err)
			}
			c.unstage(t, id, staging)
			c.delete(t, id)
		})
	}
}

func controllerExpand(t *testing.T, c clients, id string, size int64) {
	t.Helper()
	resp, err := c.ctrl.ControllerExpandVolume(ctxT(t), &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: size}})
	if err != nil || resp.GetCapacityBytes() != size || !resp.GetNodeExpansionRequired() {
		t.Fatalf("ControllerExpandVolume: %v %v", resp, err)
	}
}

// TestNeverReformat stages an ext4 volume, then asks for xfs: the driver must refuse rather
// than format over the data.
func TestNeverReformat(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	c := clients{ctrl: in.Controller, node: in.Node}
	id := c.create(t, "v", "block", 320<<20).GetVolumeId()
	staging := in.Path("staging")
	c.stage(t, id, staging, mountCap("ext4"))
	if err := os.WriteFile(filepath.Join(staging, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.unstage(t, id, staging)
	_, err := c.node.NodeStageVolume(ctxT(t), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap("xfs")})
	if err == nil {
		t.Fatal("staging an ext4 volume as xfs succeeded: it was reformatted")
	}
	c.stage(t, id, staging, mountCap("ext4"))
	if _, err := os.Stat(filepath.Join(staging, "keep")); err != nil {
		t.Errorf("data lost across restage: %v", err)
	}
	c.unstage(t, id, staging)
	c.delete(t, id)
}

// TestEphemeral publishes inline ephemeral volumes of both types: NodePublishVolume creates
// them, NodeUnpublishVolume deletes them.
func TestEphemeral(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	for _, typ := range []string{"dir", "block"} {
		target := in.Path("pods", typ)
		id := "csi-ephemeral-" + typ
		_, err := in.Node.NodePublishVolume(ctxT(t), &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: mountCap(""),
			VolumeContext: map[string]string{driver.ContextEphemeral: "true", "type": typ, "size": "32Mi"}})
		if err != nil {
			t.Fatalf("ephemeral %s: %v", typ, err)
		}
		if err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		stats, err := in.Node.NodeGetVolumeStats(ctxT(t), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
		if err != nil || len(stats.GetUsage()) != 2 {
			t.Fatalf("stats of ephemeral %s: %v %v", typ, stats, err)
		}
		if _, err := in.Node.NodeUnpublishVolume(ctxT(t), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Errorf("target %s still exists: %v", target, err)
		}
		_, err = in.Node.NodeUnpublishVolume(ctxT(t), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
		wantCode(t, err, codes.NotFound, "NodeUnpublishVolume of a deleted ephemeral volume")
	}
	if left, err := drivertest.Leftovers(in.Dir); err != nil || len(left) > 0 {
		t.Errorf("left behind: %v %v", left, err)
	}
	if des, _ := os.ReadDir(filepath.Join(in.Config.StateDir, "ephemeral")); len(des) > 0 {
		t.Errorf("ephemeral volumes left: %v", des)
	}
}

// TestEphemeralReadOnly publishes read-only inline ephemeral volumes of both types, as
// upstream's "should create read-only inline ephemeral volume" does: the new volume is
// mounted and refuses writes. A block one's image is new, so it must be formatted before
// its read-only mount (mount-utils will not format a disk it mounts read-only: "cannot
// mount unformatted disk ... in read-only mode").
func TestEphemeralReadOnly(t *testing.T) {
	drivertest.RequireRoot(t)
	in := drivertest.Start(t, driver.Config{})
	for _, typ := range []string{"dir", "block"} {
		target := in.Path("pods", "ro-"+typ)
		id := "csi-ephemeral-ro-" + typ
		_, err := in.Node.NodePublishVolume(ctxT(t), &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: mountCap(""),
			Readonly: true, VolumeContext: map[string]string{driver.ContextEphemeral: "true", "type": typ, "size": "32Mi"}})
		if err != nil {
			t.Fatalf("read-only ephemeral %s: %v", typ, err)
		}
		err = os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644)
		if !errors.Is(err, unix.EROFS) {
			t.Errorf("write into the read-only ephemeral %s volume: %v, want EROFS", typ, err)
		}
		if _, err := in.Node.NodeUnpublishVolume(ctxT(t), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := drivertest.Leftovers(in.Dir); err != nil || len(left) > 0 {
		t.Errorf("left behind: %v %v", left, err)
	}
}

// TestFaultsAndCallLog injects one UNAVAILABLE into CreateVolume and checks the call log
// records the lifecycle in order.
func TestFaultsAndCallLog(t *testing.T) {
	drivertest.RequireRoot(t)
	rules, err := driver.ParseFaults("CreateVolume:error=UNAVAILABLE,count=1")
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(drivertest.TempDir(t), "calls.jsonl")
	in := drivertest.Start(t, driver.Config{Faults: rules, CallLog: logPath})
	c := clients{ctrl: in.Controller, node: in.Node}
	req := &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{mountCap("")}}
	_, err = c.ctrl.CreateVolume(ctxT(t), req)
	wantCode(t, err, codes.Unavailable, "first CreateVolume with an injected fault")
	resp, err := c.ctrl.CreateVolume(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	staging, target := in.Path("staging"), in.Path("target")
	c.stage(t, id, staging, mountCap(""))
	c.publish(t, id, staging, target, mountCap(""))
	c.unpublish(t, id, target)
	c.unstage(t, id, staging)
	c.delete(t, id)
	in.Stop()
	calls, err := driver.ReadCallLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range calls {
		if r.Method != "Probe" {
			got = append(got, r.Method+"/"+r.Code)
		}
	}
	want := []string{"CreateVolume/Unavailable", "CreateVolume/OK", "NodeStageVolume/OK", "NodePublishVolume/OK",
		"NodeUnpublishVolume/OK", "NodeUnstageVolume/OK", "DeleteVolume/OK"}
	if len(got) != len(want) {
		t.Fatalf("call log %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("call log %v, want %v", got, want)
		}
	}
	if calls[len(calls)-1].VolumeID != id {
		t.Errorf("call log volume ID %q, want %q", calls[len(calls)-1].VolumeID, id)
	}
}
