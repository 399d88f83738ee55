package controller

import (
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) step(d time.Duration) { c.t = c.t.Add(d) }
func newClock(w *Writes[string]) *fakeClock {
	c := &fakeClock{t: time.Unix(1000, 0)}
	w.now = c.now
	return c
}

// Guarantee 1: the latest write of a key is the one waited for.
func TestWritesLatestWins(t *testing.T) {
	var w Writes[string]
	w.Expect("va", "1")
	w.Expect("va", "2")
	w.Observe("va", "1")
	if !w.Pending("va") {
		t.Fatal("delivering the first write's version cleared the mark of the second")
	}
	w.Observe("va", "2")
	if w.Pending("va") {
		t.Fatal("delivering the last write's version left the mark")
	}
}

// Guarantee 2: only a present mark of the same version matches (the attacher's superseded
// metadata write: a missing mark must not match an object without a resourceVersion).
func TestWritesIsNeedsAMark(t *testing.T) {
	var w Writes[string]
	if w.Is("va", "") {
		t.Error("a key without a mark matched the empty version")
	}
	w.Expect("va", "7")
	if !w.Is("va", "7") {
		t.Error("the marked version did not match")
	}
	if w.Is("va", "8") || w.Is("other", "7") {
		t.Error("another version or another key matched")
	}
}

// Guarantee 3: a version delivered late does not clear the mark of the version written.
func TestWritesObserveOnlyTheWrittenVersion(t *testing.T) {
	var w Writes[string]
	w.Expect("va", "10")
	w.Observe("va", "9")
	w.Observe("other", "10")
	if !w.Pending("va") {
		t.Fatal("an older version, or another key's, cleared the mark")
	}
	w.Observe("va", "10")
	if w.Pending("va") {
		t.Fatal("the written version did not clear the mark")
	}
}

// Guarantee 4: ExpectUnless and the handler that clears the mark never leave a stale mark,
// whichever runs first (the claim controller's saved PV).
func TestWritesExpectUnlessRacesTheHandler(t *testing.T) {
	for i := range 200 {
		var w Writes[types.UID]
		var mu sync.Mutex
		cached := false
		var wg sync.WaitGroup
		wg.Go(func() { // the informer: store, then call the handler
			mu.Lock()
			cached = true
			mu.Unlock()
			w.Forget("uid")
		})
		wg.Go(func() {
			w.ExpectUnless("uid", "", func() bool { mu.Lock(); defer mu.Unlock(); return cached })
		})
		wg.Wait()
		if w.Pending("uid") {
			t.Fatalf("round %d: the mark outlived the cache showing the write", i)
		}
	}
	var w Writes[string]
	w.ExpectUnless("k", "", func() bool { return true })
	if w.Pending("k") {
		t.Error("a write the cache already shows was marked")
	}
	w.ExpectUnless("k", "", func() bool { return false })
	if !w.Pending("k") {
		t.Error("a write the cache does not show was not marked")
	}
}

// Guarantee 5: a mark expires with its window, and Remaining counts down to it.
func TestWritesWindow(t *testing.T) {
	w := Writes[string]{Window: 30 * time.Second}
	clock := newClock(&w)
	w.Expect("pvc", "")
	if got := w.Remaining("pvc"); got != 30*time.Second {
		t.Errorf("Remaining = %s right after the write, want 30s", got)
	}
	clock.step(20 * time.Second)
	if got := w.Remaining("pvc"); got != 10*time.Second || !w.Pending("pvc") {
		t.Errorf("Remaining = %s, Pending = %v after 20s, want 10s and true", got, w.Pending("pvc"))
	}
	clock.step(10 * time.Second)
	if w.Pending("pvc") || w.Remaining("pvc") != 0 || w.Take("pvc") {
		t.Error("the mark outlived its window")
	}
	var noWindow Writes[string]
	newClock(&noWindow).step(24 * time.Hour)
	noWindow.Expect("k", "")
	if noWindow.Remaining("k") != 0 || !noWindow.Pending("k") {
		t.Error("without a window a mark must stay, with nothing to wait for")
	}
}

// Guarantee 6: a one-shot mark is taken by exactly one of many concurrent syncs.
func TestWritesTakeOnce(t *testing.T) {
	var w Writes[string]
	w.Expect("va", "")
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for range 16 {
		wg.Go(func() {
			if w.Take("va") {
				mu.Lock()
				taken++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if taken != 1 {
		t.Fatalf("the mark was taken %d times, want once", taken)
	}
	w.Expect("va", "") // a failed sync puts it back
	if !w.Take("va") {
		t.Fatal("a mark put back was not taken")
	}
}

// Guarantee 7: a deleted object's key starts clean when the object is re-created.
func TestWritesForget(t *testing.T) {
	var w Writes[string]
	w.Expect("va", "3")
	w.Forget("va")
	if w.Pending("va") || w.Is("va", "3") {
		t.Fatal("Forget left the mark")
	}
	w.Forget("never-marked") // must not panic on the zero value either
}

// Guarantee 8: the zero value works, and concurrent use is safe (make test runs it under the race
// detector).
func TestWritesConcurrent(t *testing.T) {
	var w Writes[int]
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				w.Expect(j, "v")
				w.Observe(j, "v")
				w.Pending(i)
				w.Take(j)
				w.Forget(j)
			}
		})
	}
	wg.Wait()
}

// Guarantee 9: marks are in memory only; a new tracker (a restart) knows nothing.
func TestWritesNotPersistent(t *testing.T) {
	old := &Writes[string]{}
	old.Expect("pv", "")
	restarted := &Writes[string]{}
	if restarted.Pending("pv") {
		t.Fatal("a new tracker has a mark")
	}
}
