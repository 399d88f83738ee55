package proc

import (
	"os"
	"testing"
	"time"
)

func TestReadUsageSelf(t *testing.T) {
	// Burn some CPU so that the reading cannot be zero.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
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
