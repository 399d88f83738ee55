package upstatus

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func TestWriterPhasesAndDetail(t *testing.T) {
	dir := t.TempDir()
	w, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	read := func() Status {
		t.Helper()
		st, err := Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := read(); st.Phase != Starting || st.PID != os.Getpid() || st.Updated.IsZero() {
		t.Fatalf("after Start: %+v", st)
	}
	w.Set(Building, "")
	// Progress output, in pieces: the last complete line is the detail.
	fmt.Fprint(w, "building kube-apiserver into /x\n  building: 10/1900 packages")
	fmt.Fprint(w, " compiled, 15s elapsed\n  building: 20")
	st := read()
	if want := "building: 10/1900 packages compiled, 15s elapsed"; st.Phase != Building || st.Detail != want {
		t.Errorf("status = %+v, want phase building, detail %q", st, want)
	}
	w.Set(Ready, "")
	w.Close(Stopped, "")
	w.Close(Failed, "etcd: not ready") // a failed start stops, then says why
	w.Set(Ready, "")                   // nothing after Close
	if st := read(); st.Phase != Failed || st.Detail != "etcd: not ready" {
		t.Errorf("after Close: %+v", st)
	}
}

func TestOnTheWay(t *testing.T) {
	now := time.Now()
	alive := func(pid int) bool { return pid == 1 }
	for _, tc := range []struct {
		st   Status
		want bool
	}{
		{Status{PID: 1, Phase: Building, Updated: now.Add(-StaleAfter / 2)}, true},
		{Status{PID: 1, Phase: Starting, Updated: now}, true},
		{Status{PID: 2, Phase: Building, Updated: now}, false},                  // process gone
		{Status{PID: 1, Phase: Building, Updated: now.Add(-StaleAfter)}, false}, // not refreshed
		{Status{PID: 1, Phase: Ready, Updated: now}, false},
		{Status{PID: 1, Phase: Failed, Updated: now}, false},
		{Status{PID: 1, Phase: Stopped, Updated: now}, false},
	} {
		if got := tc.st.OnTheWay(now, alive); got != tc.want {
			t.Errorf("%+v: OnTheWay = %v, want %v", tc.st, got, tc.want)
		}
	}
	if !Alive(os.Getpid()) || Alive(0) || Alive(-1) {
		t.Error("Alive: wrong for this process, 0 or -1")
	}
}
