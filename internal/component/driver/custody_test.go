package driver_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// custodySetup runs a driver on a state directory of its own, creates a dir volume with a
// file in it and stops the driver, leaving the records and the data, as an operator finds
// them before the mistakes these tests make.
func custodySetup(t *testing.T) (cfg driver.Config, volumeID, file string) {
	t.Helper()
	drivertest.RequireRoot(t)
	cfg = driver.Config{NodeID: "node-1", StateDir: filepath.Join(drivertest.TempDir(t), "state"), Capacity: 100 << 20}
	in, err := drivertest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := clients{ctrl: in.Controller, node: in.Node}
	id := c.create(t, "precious", "dir", 10<<20).GetVolumeId()
	file = filepath.Join(cfg.StateDir, "volumes", id, "data")
	if err := os.WriteFile(file, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	return cfg, id, file
}

func mustSurvive(t *testing.T, path string) {
	t.Helper()
	if b, err := os.ReadFile(path); err != nil || string(b) != "keep me" {
		t.Fatalf("the volume's data is gone: %q, %v", b, err)
	}
}

// TestStartRefusesUntrustedRecords makes the operator's mistakes of the data-loss report:
// the record file moved away, emptied, truncated, or the driver started with another
// node ID, driver name or state directory. Each start must refuse with an error that names
// the record file and the recovery, and leave the volume's data where it was.
func TestStartRefusesUntrustedRecords(t *testing.T) {
	cfg, _, file := custodySetup(t)
	record := filepath.Join(cfg.StateDir, "controller.json")
	good, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(filepath.Dir(cfg.StateDir), "copy")
	// A lost or damaged record is caught at the record; a foreign directory already at
	// the marker beside the data.
	for _, tc := range []struct {
		name, file string
		break_     func(cfg *driver.Config)
	}{
		{"missing", "controller.json", func(*driver.Config) { os.Remove(record) }},
		{"empty", "controller.json", func(*driver.Config) { os.WriteFile(record, nil, 0o600) }},
		{"truncated", "controller.json", func(*driver.Config) { os.WriteFile(record, good[:len(good)/2], 0o600) }},
		{"other node", "identity.json", func(c *driver.Config) { c.NodeID = "node-2" }},
		{"other driver", "identity.json", func(c *driver.Config) { c.DriverName = "other.example.com" }},
		{"other state dir", "identity.json", func(c *driver.Config) {
			if err := os.Rename(cfg.StateDir, moved); err != nil {
				t.Fatal(err)
			}
			c.StateDir = moved
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			tc.break_(&c)
			_, err := driver.New(c)
			if err == nil {
				t.Fatal("the driver started")
			}
			want := []string{filepath.Join(c.StateDir, tc.file), "--recover=quarantine", "No data was touched"}
			if tc.file == "identity.json" { // written for another owner: adopting is a way out
				want = append(want, "--recover=adopt")
			} else if strings.Contains(err.Error(), "--recover=adopt") {
				t.Errorf("error %q offers to adopt a record that is not there", err)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			t.Logf("refused: %v", err)
			if c.StateDir == moved {
				mustSurvive(t, strings.Replace(file, cfg.StateDir, moved, 1))
				if err := os.Rename(moved, cfg.StateDir); err != nil {
					t.Fatal(err)
				}
			}
			mustSurvive(t, file)
			if err := os.WriteFile(record, good, 0o600); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRecoverAdopt trusts the records of a state directory moved on purpose: the volume
// is still served, with its data.
func TestRecoverAdopt(t *testing.T) {
	cfg, id, file := custodySetup(t)
	moved := filepath.Join(filepath.Dir(cfg.StateDir), "moved")
	if err := os.Rename(cfg.StateDir, moved); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir, cfg.Recover = moved, driver.RecoverAdopt
	in := drivertest.Start(t, cfg)
	if _, err := in.Controller.ControllerGetVolume(ctxT(t), &csi.ControllerGetVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("adopted volume: %v", err)
	}
	mustSurvive(t, strings.Replace(file, filepath.Dir(file), filepath.Join(moved, "volumes", id), 1))
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	cfg.Recover = ""
	drivertest.Start(t, cfg) // the adopted records now carry this identity
}

// TestRecoverQuarantine starts afresh after a lost record: the old file is kept beside,
// the volume's data moves to the quarantine, still counted against the pool, and reported
// by a metric.
func TestRecoverQuarantine(t *testing.T) {
	cfg, id, file := custodySetup(t)
	record := filepath.Join(cfg.StateDir, "controller.json")
	if err := os.WriteFile(record, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Recover = driver.RecoverQuarantine
	in := drivertest.Start(t, cfg)
	mustSurvive(t, filepath.Join(cfg.StateDir, "quarantine", "volumes", id, "data"))
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the data is still in volumes/: %v", err)
	}
	aside, _ := filepath.Glob(record + ".set-aside-*")
	if len(aside) != 1 {
		t.Errorf("the unreadable record was not kept: %v", aside)
	}
	list, err := in.Controller.ListVolumes(ctxT(t), &csi.ListVolumesRequest{})
	if err != nil || len(list.GetEntries()) != 0 {
		t.Fatalf("ListVolumes after a quarantine: %v, %v", list, err)
	}
	resp, err := in.Controller.GetCapacity(ctxT(t), &csi.GetCapacityRequest{Parameters: map[string]string{"type": "dir"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAvailableCapacity() >= 100<<20 {
		t.Errorf("the quarantine holds no space: %d bytes free of %d", resp.GetAvailableCapacity(), 100<<20)
	}
	if m := scrape(t, in.Driver); !strings.Contains(m, "kubevol_driver_quarantined_entries 1") {
		t.Errorf("no quarantine metric:\n%s", m)
	}
}

// TestFirstStartAndOldRecords: an empty directory initialises; records written before
// markers existed are adopted without an operator; a record file without data is a
// first start even when it is unreadable, and the file is kept.
func TestFirstStartAndOldRecords(t *testing.T) {
	cfg, id, file := custodySetup(t)
	marker := filepath.Join(cfg.StateDir, "identity.json")
	record := filepath.Join(cfg.StateDir, "controller.json")
	var doc map[string]any
	b, _ := os.ReadFile(record)
	if err := json.Unmarshal(b, &doc); err != nil || doc["identity"] == nil {
		t.Fatalf("record without identity: %s (%v)", b, err)
	}
	// The documents of an older kubevol: no identity, no marker.
	for _, name := range []string{"controller.json", "node.json"} {
		stripIdentity(t, filepath.Join(cfg.StateDir, name))
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	in := drivertest.Start(t, cfg)
	if _, err := in.Controller.ControllerGetVolume(ctxT(t), &csi.ControllerGetVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("volume of the old records: %v", err)
	}
	mustSurvive(t, file)
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	// The second process of a split node upgrades after the first made the marker: its
	// record has no identity while the marker exists.
	stripIdentity(t, filepath.Join(cfg.StateDir, "node.json"))
	in = drivertest.Start(t, cfg)
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}

	empty := driver.Config{NodeID: "node-1", StateDir: filepath.Join(drivertest.TempDir(t), "state")}
	if err := os.MkdirAll(empty.StateDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(empty.StateDir, "controller.json"), []byte("{\"vol"), 0o600); err != nil {
		t.Fatal(err)
	}
	drivertest.Start(t, empty)
	if aside, _ := filepath.Glob(filepath.Join(empty.StateDir, "controller.json.set-aside-*")); len(aside) != 1 {
		t.Errorf("the unreadable record of an empty directory was overwritten, not kept: %v", aside)
	}
}

// TestInterruptedCreateRollsBackOnlyItsIntent plants what a kill -9 leaves: a record in
// the creating state with its data, and data that no record names. The restart removes
// the first, quarantines the second, and never touches a complete volume.
func TestInterruptedCreateRollsBackOnlyItsIntent(t *testing.T) {
	cfg, id, file := custodySetup(t)
	record := state.NewFile(filepath.Join(cfg.StateDir, "controller.json"))
	st := state.NewController()
	if _, err := record.Load(st); err != nil {
		t.Fatal(err)
	}
	// A record restored from a backup may call creating a volume that was created since and
	// is mounted: it must be kept.
	for _, v := range []string{"v-creating", "v-creating-mounted"} {
		st.Volumes[v] = &state.Volume{ID: v, Name: v, Type: "dir", CapacityBytes: 1 << 20, Node: "node-1", CreatedAt: time.Now(), Creating: true}
	}
	if err := record.Save(st); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v-creating", "v-unrecorded", "v-creating-mounted"} {
		if err := os.MkdirAll(filepath.Join(cfg.StateDir, "volumes", v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(filepath.Dir(cfg.StateDir), "pod-target")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(filepath.Join(cfg.StateDir, "volumes", "v-creating-mounted"), target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	in := drivertest.Start(t, cfg)
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "volumes", "v-creating-mounted")); err != nil {
		t.Errorf("a mounted volume its record calls creating was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "volumes", "v-creating")); !os.IsNotExist(err) {
		t.Errorf("the interrupted creation was not rolled back: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "quarantine", "volumes", "v-unrecorded")); err != nil {
		t.Errorf("unrecorded data was not quarantined: %v", err)
	}
	mustSurvive(t, file)
	_, err := in.Controller.ControllerGetVolume(ctxT(t), &csi.ControllerGetVolumeRequest{VolumeId: "v-creating"})
	wantCode(t, err, codes.NotFound, "the rolled back volume")
	if _, err := in.Controller.ControllerGetVolume(ctxT(t), &csi.ControllerGetVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}

// stripIdentity makes the record at p look like one written before markers existed.
func stripIdentity(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	delete(d, "identity")
	b, _ = json.Marshal(d)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
