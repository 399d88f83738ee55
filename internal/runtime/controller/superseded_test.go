package controller

import (
	"sync"
	"testing"
)

func TestSupersededOverNeedsAWrite(t *testing.T) {
	var s Superseded[string]
	if s.Over("va", "") || s.Pending("va") {
		t.Fatal("a key without a write matched")
	}
	s.Wrote("va", "1", "1")
	if s.Pending("va") {
		t.Fatal("a write that changed nothing was recorded")
	}
	s.Wrote("va", "1", "2")
	s.Wrote("va", "2", "3")
	if !s.Over("va", "1") || !s.Over("va", "2") || s.Over("va", "3") || s.Over("other", "1") {
		t.Fatal("Over must match exactly the versions written over, of that key")
	}
}

// The cache moving past a version written over, or showing a version written, drops the
// write; a version delivered late leaves it.
func TestSupersededDelivered(t *testing.T) {
	var s Superseded[string]
	s.Wrote("c", "1", "2")
	s.Wrote("c", "2", "3")
	if s.Delivered("c", "0", "1") || !s.Pending("c") {
		t.Fatal("an older delivery dropped a write")
	}
	if !s.Delivered("c", "1", "2") || s.Over("c", "1") {
		t.Fatal("moving past version 1 left its write")
	}
	if !s.Delivered("c", "9", "3") || s.Pending("c") {
		t.Fatal("showing the version written left its write")
	}
	s.Wrote("c", "3", "4")
	s.Forget("c")
	if s.Pending("c") {
		t.Fatal("Forget left a write")
	}
}

func TestSupersededConcurrent(t *testing.T) {
	var s Superseded[int]
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s.Wrote(i, "a", "b")
			_ = s.Over(i, "a")
			s.Delivered(i, "a", "b")
		})
	}
	wg.Wait()
	for i := range 8 {
		if s.Pending(i) {
			t.Fatalf("key %d pending", i)
		}
	}
}
