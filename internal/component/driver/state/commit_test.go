package state

import (
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// doc is a document with its lock, as the driver's controller and node keep theirs.
type doc struct {
	mu   sync.Mutex
	st   *Controller
	file *File
	c    *Committer
	// rolledBack counts the rollbacks.
	rolledBack int
}

func newDoc(t *testing.T, path string) *doc {
	t.Helper()
	d := &doc{st: NewController(), file: NewFile(path)}
	d.c = NewCommitter(d.file, &d.mu, func() any { return d.st }, func(error) {
		d.rolledBack++
		d.st = NewController()
		if _, err := d.file.Load(d.st); err != nil {
			t.Errorf("reload: %v", err)
		}
		d.st.Normalize()
	})
	return d
}

func (d *doc) add(id string) error {
	d.mu.Lock()
	d.st.Volumes[id] = &Volume{ID: id, Type: TypeDir}
	return d.c.Commit()
}

// A write that fails rolls back every change not on disk and fails every caller that made
// one, including a change made after the failed write had encoded the document.
func TestCommitterFailedWriteRollsBack(t *testing.T) {
	dir := t.TempDir()
	d := newDoc(t, filepath.Join(dir, "c.json"))
	if err := d.add("kept"); err != nil {
		t.Fatal(err)
	}
	// From now on writes fail: the directory of the document is gone.
	d.file = NewFile(filepath.Join(dir, "missing", "c.json"))
	d.c.file = d.file
	late := make(chan error, 1)
	d.c.BeforeWrite = func(int) {
		d.c.BeforeWrite = nil
		go func() { late <- d.add("late") }() // joins the next batch, after the encode
		for {
			d.mu.Lock()
			n := len(d.st.Volumes)
			d.mu.Unlock()
			if n == 3 {
				return
			}
			runtime.Gosched()
		}
	}
	if err := d.add("lost"); err == nil {
		t.Fatal("Commit succeeded although the write failed")
	}
	if err := <-late; err == nil {
		t.Error("a change made after the failed write's encode was reported durable")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.st.Volumes["lost"] != nil || d.st.Volumes["late"] != nil {
		t.Errorf("memory still holds changes that are not on disk: %v", d.st.SortedVolumeIDs())
	}
	if d.rolledBack != 1 {
		t.Errorf("%d rollbacks, want 1", d.rolledBack)
	}
	if w, n := d.c.Writes(); w != 1 || n != 1 {
		t.Errorf("Writes() = %d, %d; want the one good write of one change", w, n)
	}
}

// A reader's Barrier waits for a write already encoded and in flight: the reader has seen
// its change in memory, so it must not answer before that change is on disk.
func TestBarrierWaitsForTheWriteInFlight(t *testing.T) {
	d := newDoc(t, filepath.Join(t.TempDir(), "c.json"))
	inWrite, release := make(chan struct{}), make(chan struct{})
	d.c.BeforeWrite = func(int) {
		close(inWrite)
		<-release
	}
	committed := make(chan error, 1)
	go func() { committed <- d.add("v1") }()
	<-inWrite // encoded, not yet written
	barrier := make(chan error, 1)
	go func() {
		d.mu.Lock()
		barrier <- d.c.Barrier()
	}()
	select {
	case <-barrier:
		t.Fatal("Barrier returned while the write of a change it could see was still in flight")
	case <-time.After(100 * time.Millisecond): // long enough for a wrong Barrier to return
	}
	close(release)
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if err := <-barrier; err != nil {
		t.Fatal(err)
	}
}
