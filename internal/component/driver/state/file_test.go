package state

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	f := NewFile(filepath.Join(dir, "controller.json"))
	got := NewController()
	if found, err := f.Load(got); err != nil || found {
		t.Fatalf("Load of a missing file: found=%v err=%v", found, err)
	}
	want := NewController()
	want.Volumes["v1"] = &Volume{ID: "v1", Name: "pvc-1", Type: TypeDir, CapacityBytes: 1 << 20, CreatedAt: time.Unix(1, 0).UTC(),
		Attachments: map[string]Attachment{"n1": {AccessMode: 1}}}
	want.Snapshots["s1"] = &Snapshot{ID: "s1", SourceVolumeID: "v1", Type: TypeDir}
	if err := f.Save(want); err != nil {
		t.Fatal(err)
	}
	if found, err := f.Load(got); err != nil || !found {
		t.Fatalf("Load: found=%v err=%v", found, err)
	}
	if got.Volumes["v1"].Name != "pvc-1" || got.Volumes["v1"].Attachments["n1"].AccessMode != 1 || got.Snapshots["s1"].SourceVolumeID != "v1" {
		t.Errorf("round trip lost data: %+v", got)
	}
	if got.Volumes["v1"].CapacityBytes != 1<<20 {
		t.Errorf("round trip lost the capacity: %+v", got.Volumes["v1"])
	}
}

// Create writes a document only once: of two processes initialising a state directory,
// one wins and the other reads the winner's document.
func TestFileCreateOnce(t *testing.T) {
	f := NewFile(filepath.Join(t.TempDir(), "identity.json"))
	first, second := NewIdentity("d", "n", "/s"), NewIdentity("d", "n", "/s")
	if won, err := f.Create(first); err != nil || !won {
		t.Fatalf("first Create: %v %v", won, err)
	}
	if won, err := f.Create(second); err != nil || won {
		t.Fatalf("second Create replaced the document: %v %v", won, err)
	}
	var got Identity
	if _, err := f.Load(&got); err != nil || got.Mismatch(first) != "" {
		t.Fatalf("Load after two Creates: %+v %v", got, err)
	}
	if temps, _ := filepath.Glob(filepath.Join(filepath.Dir(f.Path()), ".identity.json.tmp-*")); len(temps) > 0 {
		t.Errorf("temp files left: %v", temps)
	}
}

func TestFileLeavesNoTemps(t *testing.T) {
	dir := t.TempDir()
	f := NewFile(filepath.Join(dir, "node.json"))
	// A temp file of a Save killed before its rename.
	stale := filepath.Join(dir, ".node.json.tmp-123")
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(NewNode()); err != nil {
		t.Fatal(err)
	}
	if err := f.RemoveTemps(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "node.json" {
		t.Errorf("directory holds %v, want node.json only", entries)
	}
}

func TestFileCorrupt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(p, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFile(p).Load(NewController()); err == nil {
		t.Fatal("Load of a corrupt document succeeded")
	}
}
