package controller

import (
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) step(d time.Duration) { c.t = c.t.Add(d) }

func TestFlags(t *testing.T) {
	var f Flags[string]
	if f.Has("a") || f.Take("a") {
		t.Fatal("an empty set has a flag")
	}
	f.Set("a")
	if !f.Has("a") || f.Has("b") {
		t.Fatal("Set did not flag only its key")
	}
	if !f.Take("a") || f.Take("a") {
		t.Fatal("Take must report a flag exactly once")
	}
	f.SetUnless("a", func() bool { return true })
	if f.Has("a") {
		t.Fatal("SetUnless flagged what was done already")
	}
	f.SetUnless("a", func() bool { return false })
	f.Set("b")
	f.ClearIf(func(k string) bool { return k == "b" })
	if !f.Has("a") || f.Has("b") {
		t.Fatal("ClearIf cleared the wrong keys")
	}
	f.Clear("a")
	if f.Has("a") {
		t.Fatal("Clear left the flag")
	}
}

// With a Window a flag expires, and Remaining is the time left.
func TestFlagsWindow(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	f := Flags[string]{Window: time.Minute, now: c.now}
	f.Set("a")
	c.step(20 * time.Second)
	if got := f.Remaining("a"); got != 40*time.Second {
		t.Fatalf("Remaining %v, want 40s", got)
	}
	c.step(40 * time.Second)
	if f.Has("a") || f.Remaining("a") != 0 {
		t.Fatal("the flag outlived its window")
	}
	var noWindow Flags[string]
	noWindow.Set("a")
	if noWindow.Remaining("a") != 0 {
		t.Fatal("Remaining without a window")
	}
}
