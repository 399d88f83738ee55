package resizer

import "testing"

// Each version written over is skipped until the informer delivers the one after it, and
// no longer: a claim the cache shows afresh is synced again.
func TestSuperseded(t *testing.T) {
	var s superseded
	s.add("ns/a", "101")
	s.add("ns/a", "103")
	if !s.has("ns/a", "101") || !s.has("ns/a", "103") || s.has("ns/a", "104") || s.has("ns/b", "101") {
		t.Fatal("has answers for versions never written over, or misses one")
	}
	if !s.take("ns/a", "101") || s.take("ns/a", "101") {
		t.Error("take must report a version once")
	}
	if s.has("ns/a", "101") || !s.has("ns/a", "103") {
		t.Error("take dropped the wrong version")
	}
	s.forget("ns/a")
	if s.has("ns/a", "103") {
		t.Error("forget kept a version of a deleted claim")
	}
}
