package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kubevol/kubevol/internal/proc"
)

// kubeletPID finds the kubelet whose --root-dir is root.
func kubeletPID(root string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && args[1] == "kubelet" && strings.Contains(string(cmdline), "\x00--root-dir="+root+"\x00") {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kubelet with --root-dir=%s", root)
}

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
