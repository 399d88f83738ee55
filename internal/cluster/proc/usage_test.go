package proc

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestReadUsageSelf(t *testing.T) {
	// Burn CPU until the kernel has counted at least three of /proc's 10 ms ticks, so that the
	// reading cannot be zero: a wall-clock budget was not enough on a loaded machine, where
	// 50 ms of waiting got the process less than one tick.
	for x := 0; ; x++ {
		_ = x * x
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		if time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) >= 30*time.Millisecond {
			break
		}
	}
	u, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.CPU <= 0 || u.RSS <= 0 || u.PeakRSS < u.RSS {
		t.Fatalf("implausible usage %+v", u)
	}
	if _, err := ReadUsage(1 << 30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
