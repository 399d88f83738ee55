package kubelet

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/kubevol/kubevol/internal/proc"
)

// idle samples the process's CPU over d: the cores it used on average, and its RSS in MiB
// at the end.
func idle(ctx context.Context, pid int, d time.Duration) (cores, rssMiB float64, err error) {
	before, err := proc.ReadUsage(pid)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(d):
	}
	after, err := proc.ReadUsage(pid)
	if err != nil {
		return 0, 0, err
	}
	return (after.CPU - before.CPU).Seconds() / time.Since(start).Seconds(), float64(after.RSS) / (1 << 20), nil
}

// loadAverage is the 1-minute load average of the machine, as /proc/loadavg gives it.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
