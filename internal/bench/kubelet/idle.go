package kubelet

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kubevol/kubevol/internal/cluster/proc"
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

// quiet waits until the machine's CPUs were mostly idle over one second (busy below a
// quarter), for at most limit, and returns how long it waited. The other stack's last
// case leaves work behind after its pods are gone (containerd's shims and snapshots, the
// kubelet's cgroup and directory cleanup): without the wait, whichever volume manager goes
// second in a case measures part of the first one's teardown.
func quiet(ctx context.Context, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit {
		busy, err := busyOver(ctx, time.Second)
		if err != nil || busy < 0.25 {
			break
		}
	}
	return time.Since(start)
}

// busyOver is the fraction of the machine's CPU time that was not idle over d, from
// /proc/stat.
func busyOver(ctx context.Context, d time.Duration) (float64, error) {
	idle0, total0, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	idle1, total1, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	if total1 <= total0 {
		return 0, nil
	}
	return 1 - float64(idle1-idle0)/float64(total1-total0), nil
}

// cpuTimes are the idle (idle and iowait) and total jiffies of the machine's "cpu" line.
func cpuTimes() (idle, total uint64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return idle, total, nil
}
