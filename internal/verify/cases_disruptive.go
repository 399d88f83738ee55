package verify

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// killNodeAgent: kill -9 of the node agent while a volume is mounted. kubevol up restarts
// it; the new agent reconstructs the mount from disk, keeps the data in place and tears the
// volume down cleanly when the pod goes.
func killNodeAgent(k *caseEnv) error {
	u, err := k.useClaim("data", classWFFC, defaultSize, "app")
	if err != nil {
		return err
	}
	old, err := nodeAgentPID(k.root)
	if err != nil {
		return err
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 node agent %d: %w", old, err)
	}
	var pid int
	err = kubecheck.Poll(k.ctx, waitTimeout, func(context.Context) (bool, error) {
		pid, _ = nodeAgentPID(k.root)
		return pid != 0 && pid != old, nil
	})
	if err != nil {
		return fmt.Errorf("no node agent came back within %s of kill -9 (does kubevol up supervise it? its restart backoff doubles with each kill: kubevol up --restart-backoff-max)", waitTimeout)
	}
	if !isMountPoint(u.dir) {
		return fmt.Errorf("%s is no longer mounted after the node agent restarted", u.dir)
	}
	if err := readProof(u.dir, u.want); err != nil {
		return err
	}
	if err := k.deletePod("app"); err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	if isMountPoint(u.dir) {
		return fmt.Errorf("the restarted node agent left %s mounted after the pod was deleted", u.dir)
	}
	return k.reuse(u, "data", "again")
}

// nodeAgentPID finds the node process serving root: the one whose --root-dir is root, never
// another node's. It is `kubevol node`, or on kubevol up --runtime containerd the real
// kubelet (`kubevol-cluster kubelet`, or a `kubelet` binary), which up restarts alike and
// which rebuilds its mounts from the pod directories as the node agent does.
func nodeAgentPID(root string) (int, error) {
	pid, _, err := nodeProcess(root)
	return pid, err
}

// nodeProcess finds the node process serving root and says whether it is a kubelet.
func nodeProcess(root string) (pid int, kubelet bool, err error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false, err
	}
	for _, ent := range entries {
		var pid int
		if _, err := fmt.Sscanf(ent.Name(), "%d", &pid); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) < 2 {
			continue
		}
		kubelet := args[1] == "kubelet" || filepath.Base(args[0]) == "kubelet"
		if args[1] != "node" && !kubelet {
			continue
		}
		for i, a := range args {
			if (a == "--root-dir" && i+1 < len(args) && args[i+1] == root) || a == "--root-dir="+root {
				return pid, kubelet, nil
			}
		}
	}
	return 0, false, fmt.Errorf("no kubevol node or kubelet process with --root-dir %s on this machine", root)
}

func restartApplies(e *env) string {
	if e.o.RestartDriver == "" {
		return "verify was not told how to restart the driver (--restart-driver CMD)"
	}
	return ""
}

// restartDriver: the driver restarts (the given command) while a volume is published; the
// data stays reachable, the pod's teardown and the next mount work against the new driver.
func restartDriver(k *caseEnv) error {
	u, err := k.useClaim("data", classWFFC, defaultSize, "app")
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(k.ctx, "/bin/sh", "-c", k.o.RestartDriver).CombinedOutput()
	if err != nil {
		return fmt.Errorf("--restart-driver: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if k.conn != nil {
		pctx, cancel := context.WithTimeout(k.ctx, time.Minute)
		err := k.conn.ProbeForever(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("the driver did not answer Probe ready after the restart: %w", err)
		}
	}
	if u.dir != "" {
		if err := readProof(u.dir, u.want); err != nil {
			return fmt.Errorf("after the driver restart: %w", err)
		}
	}
	if err := k.deletePod("app"); err != nil {
		return fmt.Errorf("after the driver restart: %w", err)
	}
	return k.reuse(u, "data", "again")
}
