// Package verify runs `kubevol verify` as a driver author would in CI: one `kubevol up
// --nodes 2` with kubevol's driver in capability profiles attached as external drivers
// (`--driver`), most on the first node only, some with one node instance per node
// (`--driver unix:///…/{node}.sock`), then `kubevol verify --driver NAME` against each, with
// JUnit output.
package verify

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/verify"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

const node = "verify-e2e"

// nodes are the up's nodes (`--nodes 2`: the second is named after the first, docs/up.md).
// The profiles of one socket run on the first only; their several-node cases are not
// applicable.
var nodes = []string{node, node + "-2"}

// profile is one capability set of `kubevol driver`, as a third-party driver might have.
type profile struct {
	name string
	args []string
	// outcomes are cases whose outcome the profile decides: "passed", or "skipped: " and
	// text the not-applicable reason must contain, so that a case wrongly found not
	// applicable fails. Every other case must pass or be not applicable, and none may fail.
	outcomes map[string]string
	// only, for a misbehaving profile, are the cases to run, each of which must fail with
	// a message containing the text given: the driver breaks the rule the case checks.
	only map[string]string
	// calls say, from the driver's call log, which RPCs must have succeeded (true) or
	// never have succeeded (false): the profile really was exercised as switched.
	calls map[string]bool
	// verifyArgs are added to the profile's verify command line.
	verifyArgs []string
	// maxVolumes, if set, is the count in the driver's --max-volumes-per-node-file, which
	// verify's --max-volumes-command rewrites, and the CSIDriver's
	// nodeAllocatableUpdatePeriodSeconds is 10 (the allocatable refresh case). With
	// ignoreMaxVolumes the driver is not given the file: its count never changes.
	maxVolumes       string
	ignoreMaxVolumes bool
	// config is more of the CSIDriver's --driver-config (YAML lines of its map).
	config string
	// timeout is the --timeout of a misbehaving profile's cases; "" means 40s.
	timeout string
	// perNode runs one instance of the driver per node, as docs/up.md tells a driver
	// author: a controller with the first node's instance, and a node instance (--mode
	// node over the controller's state directory) for each other node.
	perNode bool
}

var profiles = []profile{
	{name: "default", outcomes: map[string]string{
		"data/persist": "passed", "block/raw": "passed", "expand/online": "passed", "expand/offline": "passed",
		"clone": "passed", "reclaim/retain": "passed", "crash/node-agent": "passed", "crash/driver-restart": "passed",
		"ephemeral/inline": "passed", "attach/detach": "skipped: CSIDriver attachRequired is false", "leftovers": "passed", "access/rwop-node": "passed",
		"modify/class": "passed", "modify/infeasible": "passed", "snapshot/group": "passed",
		"access/shared": "passed", "subpath": "passed", "capacity/objects": "passed", "ephemeral/inline-separate": "passed",
		"snapshot/retain-import": "passed", "clone/larger": "passed", "crash/deleted-while-down": "passed",
		"limits/volumes":      "skipped: the driver reports no max_volumes_per_node",
		"provision/immediate": "passed", "provision/wffc": "passed", "access/rwop": "passed", "access/fsgroup": "passed",
		"ephemeral/generic": "passed", "reclaim/delete": "passed", "access/fsgroup-policy": "passed", "data/large-files": "passed",
		"pv/fields": "passed", "ephemeral/generic-block": "passed", "snapshot/overwrite": "passed", "snapshot/restore-larger": "passed",
		// seLinuxMount: true, but this kernel has no SELinux.
		"selinux/mount": "skipped: this host has no SELinux", "limits/refresh": "skipped: the CSIDriver sets no nodeAllocatableUpdatePeriodSeconds",
		"topology/pinned-away": "skipped: the driver is registered on one node only",
		"multinode/rwx":        "skipped: the driver is registered on 1 node(s)",
	}, config: "  volumeLifecycleModes: [Persistent, Ephemeral]\n  seLinuxMount: true\n", calls: map[string]bool{"NodeStageVolume": true, "ControllerExpandVolume": true, "ControllerPublishVolume": false, "ControllerModifyVolume": true,
		"CreateVolumeGroupSnapshot": true, "DeleteVolumeGroupSnapshot": true}},
	{name: "nostage", args: []string{"--without", "staging,plugin-expansion,list-volumes"}, outcomes: map[string]string{
		"data/persist": "passed", "block/raw": "passed", "expand/online": "passed", "expand/offline": "passed",
		"expand/online-block": "passed", "crash/node-agent": "passed", "access/readonly": "passed",
		"access/shared": "passed", "clone/larger": "passed", "multi/volumes": "passed", "crash/deleted-while-down": "passed",
	}, calls: map[string]bool{"NodeStageVolume": false, "NodePublishVolume": true, "ControllerExpandVolume": true, "ListVolumes": false}},
	{name: "attach", args: []string{"--attach-required", "--without", "get-capacity,modify,group-snapshots"}, outcomes: map[string]string{
		"attach/detach": "passed", "block/raw": "passed", "expand/online-block": "passed", "crash/node-agent": "passed",
		"modify/class": "skipped: the driver does not advertise MODIFY_VOLUME", "crash/deleted-while-down": "passed",
		"capacity/objects": "skipped: CSIDriver storageCapacity is false", "multi/volumes": "passed",
		"snapshot/restore": "passed", "snapshot/group": "skipped: the driver does not advertise GROUP_CONTROLLER_SERVICE",
	}, calls: map[string]bool{"ControllerPublishVolume": true, "ControllerUnpublishVolume": true, "GetCapacity": false, "ControllerModifyVolume": false, "CreateVolumeGroupSnapshot": false}},
	{name: "nodeexpand", args: []string{"--without", "controller-expansion,snapshots,modify"}, maxVolumes: "6", outcomes: map[string]string{
		"expand/online": "passed", "expand/offline": "passed", "expand/online-block": "passed",
		"snapshot/restore":  "skipped: the driver does not advertise CREATE_DELETE_SNAPSHOT",
		"modify/infeasible": "skipped: the driver does not advertise MODIFY_VOLUME", "limits/volumes": "passed", "ephemeral/generic-expand": "passed",
		"snapshot/overwrite": "skipped: the driver does not advertise CREATE_DELETE_SNAPSHOT",
		"limits/refresh":     "passed",
	}, calls: map[string]bool{"ControllerExpandVolume": false, "NodeExpandVolume": true, "CreateSnapshot": false}},
	// A filesystem-only driver (--without block refuses raw block with InvalidArgument): each
	// case that maps a device is not applicable for that reason, once a filesystem claim of
	// the same class has shown that the class works, and none fails.
	{name: "noblock", args: []string{"--without", "block"},
		verifyArgs: []string{"--only", "block/,ephemeral/generic-block,expand/online-block,multi/volumes"}, outcomes: map[string]string{
			"block/raw": "skipped: the driver refuses raw block", "ephemeral/generic-block": "skipped: the driver refuses raw block",
			"expand/online-block": "skipped: the driver refuses raw block", "multi/volumes": "skipped: the driver refuses raw block",
		}, calls: map[string]bool{"NodePublishVolume": true}},
	// Network volumes with one node instance per node, as docs/verify.md's several-node run:
	// the cases that need a second node of the driver (only those: the others run above).
	{name: "network", perNode: true, config: "  storageClass:\n    parameters: {placement: network}\n",
		verifyArgs: []string{"--only", "multinode/,topology/"}, outcomes: map[string]string{
			"multinode/rwo-move": "passed", "multinode/rwx": "passed", "multinode/out-of-service": "passed", "topology/pinned-away": "passed",
		}},
	// A driver that breaks the rule: its ControllerModifyVolume refuses every class, so the
	// modification cases must fail, each because the claim's first class stays Infeasible
	// (within a short --timeout: it waits for a modification that never comes).
	{name: "badmodify", args: []string{"--fault", "ControllerModifyVolume:error=INVALID_ARGUMENT"}, timeout: "20s",
		only: map[string]string{
			"modify/class":      "Infeasible (ModifyVolumeError: ",
			"modify/infeasible": "Infeasible (ModifyVolumeError: ",
		}},
	// A driver that ignores what it is told: mount options, the readOnly flag, a volume's
	// content source, a raw block publish's access type, a change of its volume limit, and
	// whose controller expansion fails. Each case that checks one of these must fail, for
	// that reason.
	{name: "broken", maxVolumes: "4", ignoreMaxVolumes: true, config: "  volumeLifecycleModes: [Persistent, Ephemeral]\n", args: []string{
		"--fault", "NodePublishVolume:clear=volume_capability.mount.mount_flags",
		"--fault", "NodeStageVolume:clear=volume_capability.mount.mount_flags",
		"--fault", "NodePublishVolume:clear=readonly",
		"--fault", "NodePublishVolume:clear=volume_capability.block",
		"--fault", "CreateVolume:clear=volume_content_source",
		"--fault", "ControllerExpandVolume:error=INVALID_ARGUMENT",
	}, only: map[string]string{
		"pv/fields": "lacks the class's mount options",
		// The provisioner itself refuses a volume made without its content source.
		"clone/larger":              "the driver ignored the volume data source",
		"ephemeral/generic-block":   "volume_capability.access_type is required",
		"ephemeral/inline-separate": "a readOnly volume",
		"ephemeral/generic-expand":  "not expanded to",
		"limits/refresh":            "the driver's NodeGetInfo reports max_volumes_per_node 0",
		// A group member restored into a claim is what makes a group snapshot worth taking.
		"snapshot/group": "the driver ignored the volume data source",
	}},
	// A driver that publishes something other than the volume (a fresh tmpfs over each
	// target): what one pod writes is not there for the next. The cases that read data
	// back through a later pod must fail, each at its own check.
	{name: "shadow", args: []string{"--fault", "NodePublishVolume:shadow"}, only: map[string]string{
		"subpath":       "directory subPath: read",
		"multi/volumes": "read back through the mount of claim",
	}},
	// A driver whose first two NodeUnstageVolume calls take 30 s: the volumes of the pods
	// deleted while the node agent was down are still staged when the case's 20 s are up.
	{name: "slowunstage", args: []string{"--fault", "NodeUnstageVolume:delay=30s,count=2"}, timeout: "20s", only: map[string]string{
		"crash/deleted-while-down": "staging path",
	}},
	// Network volumes on both nodes, but each node instance publishes a tmpfs of its own
	// instead of the volume: a write through one node's mount is not read through the
	// other's, the rule multinode/rwx checks (ReadWriteMany across nodes).
	{name: "rwxshadow", perNode: true, args: []string{"--fault", "NodePublishVolume:shadow"},
		config: "  storageClass:\n    parameters: {placement: network}\n", only: map[string]string{
			"multinode/rwx": "the other node's mount does not show pod on-a's write",
		}},
	// Network volumes with attach, but the controller's first six ControllerUnpublishVolume
	// calls fail: the attacher retries at 1, 2, 4, 8 and 16 s, so the force-detach of the
	// out-of-service node cannot complete before the 7th call, over a minute after the
	// first, when the case's 40 s are long over (and the claim's deletion then succeeds,
	// so nothing stays behind). multinode/out-of-service must fail at the detach.
	{name: "stuckdetach", perNode: true, args: []string{"--attach-required", "--fault", "ControllerUnpublishVolume:error=INTERNAL,count=6"},
		config: "  storageClass:\n    parameters: {placement: network}\n", only: map[string]string{
			"multinode/out-of-service": "was not force-detached from the out-of-service node " + nodes[1],
		}},
}

func driverName(p profile) string { return p.name + ".verify.kubevol.io" }

func TestVerifyProfiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("kubevol verify needs root (mounts, loop devices); run the tests as root")
	}
	bin := build(t)
	// Not t.TempDir: unix socket paths must stay under 108 bytes.
	tmp, err := os.MkdirTemp("", "kvverify-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		left, _ := drivertest.Leftovers(tmp)
		for _, l := range left {
			t.Errorf("leaked: %s", l)
		}
		_ = drivertest.Release(tmp)
		_ = os.RemoveAll(tmp)
	})

	// The drivers run first and outlive up, as a driver author's own driver does. The
	// default profile runs under a loop that restarts it, so verify can restart it.
	upArgs := []string{"up", "--dir", filepath.Join(tmp, "up"), "--node-name", node, "--nodes", strconv.Itoa(len(nodes)), "--status-interval", "10s",
		// Each profile's run kills the node agent twice: up's restart backoff would double
		// to a minute by the last profile.
		"--restart-backoff-max", "2s"}
	config := ""
	for _, p := range profiles {
		dir := filepath.Join(tmp, p.name)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if p.perNode {
			for i, n := range nodes {
				args := []string{"driver", "--endpoint", "unix://" + filepath.Join(dir, n+".sock"), "--node-id", n,
					"--state-dir", filepath.Join(dir, "state-"+n), "--drivername", driverName(p), "--call-log", filepath.Join(dir, "calls-"+n+".jsonl")}
				if i == 0 {
					args = append(args, "--topology-nodes", strings.Join(nodes[1:], ","))
				} else {
					args = append(args, "--mode", "node", "--controller-state-dir", filepath.Join(dir, "state-"+nodes[0]))
				}
				start(t, bin, append(args, p.args...), filepath.Join(dir, "driver-"+n+".log"))
			}
			config += driverName(p) + ":\n" + p.config
			upArgs = append(upArgs, "--driver", "unix://"+filepath.Join(dir, "{node}.sock"))
			continue
		}
		args := append([]string{"driver", "--endpoint", "unix://" + filepath.Join(dir, "csi.sock"), "--node-id", node,
			"--state-dir", filepath.Join(dir, "state"), "--drivername", driverName(p), "--call-log", filepath.Join(dir, "calls.jsonl")}, p.args...)
		cfg := p.config
		if p.maxVolumes != "" {
			countFile := filepath.Join(dir, "max-volumes")
			if err := os.WriteFile(countFile, []byte(p.maxVolumes+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if !p.ignoreMaxVolumes {
				args = append(args, "--max-volumes-per-node-file", countFile)
			}
			cfg += "  nodeAllocatableUpdatePeriodSeconds: 10\n"
		}
		if cfg != "" {
			config += driverName(p) + ":\n" + cfg
		}
		if p.name == "default" {
			startLoop(t, bin, args, filepath.Join(dir, "pid"), filepath.Join(dir, "driver.log"))
		} else {
			start(t, bin, args, filepath.Join(dir, "driver.log"))
		}
		upArgs = append(upArgs, "--driver", "unix://"+filepath.Join(dir, "csi.sock"))
	}
	cfgFile := filepath.Join(tmp, "drivers.yaml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	upArgs = append(upArgs, "--driver-config", cfgFile)
	// A cold machine builds the control plane first; verify's --wait is not meant for that.
	if out, err := exec.Command(bin, "up", "--build-only", "--dir", filepath.Join(tmp, "up")).CombinedOutput(); err != nil {
		t.Fatalf("kubevol up --build-only: %v\n%s", err, out)
	}
	// As docs/verify.md's CI script: verify starts right after up, and waits for the
	// cluster, the driver's registration, its CSIDriver and up's node directory.
	upExited := runUp(t, bin, upArgs, filepath.Join(tmp, "up.log"))

	for _, p := range profiles {
		// Without up every profile would wait out its timeouts: the test stops at once.
		if err := upExited(); err != nil {
			t.Fatalf("kubevol up exited before profile %s: %v", p.name, err)
		}
		t.Run(p.name, func(t *testing.T) {
			args := []string{"--driver", driverName(p), "--dir", filepath.Join(tmp, "up")}
			if p.name == "default" {
				args = append(args, "--restart-driver", "kill $(cat "+filepath.Join(tmp, p.name, "pid")+")")
			}
			if p.maxVolumes != "" {
				args = append(args, "--max-volumes-command", "echo $KUBEVOL_VERIFY_MAX_VOLUMES > "+filepath.Join(tmp, p.name, "max-volumes"))
			}
			args = append(args, p.verifyArgs...)
			if p.only != nil {
				// Failing cases wait for what never comes: a short case timeout.
				var names []string
				for name := range p.only {
					names = append(names, name)
				}
				timeout := p.timeout
				if timeout == "" {
					timeout = "40s"
				}
				args = append(args, "--only", strings.Join(names, ","), "--timeout", timeout)
				got := runVerify(t, bin, filepath.Join(tmp, p.name+".xml"), true, args...)
				for name, text := range p.only {
					if got[name].outcome != "failed" || !strings.Contains(got[name].message, text) {
						t.Errorf("case %s against a driver that breaks its rule: %s (%q), want failed with %q", name, got[name].outcome, got[name].message, text)
					}
				}
				return
			}
			got := runVerify(t, bin, filepath.Join(tmp, p.name+".xml"), slices.Contains(slices.Collect(maps.Values(p.outcomes)), "failed"), args...)
			checkOutcomes(t, got, p.outcomes)
			for name, r := range got {
				if r.outcome == "failed" && p.outcomes[name] != "failed" {
					t.Errorf("case %s failed", name)
				}
			}
			if len(p.calls) == 0 {
				return
			}
			ok := succeededCalls(t, filepath.Join(tmp, p.name, "calls.jsonl"))
			for method, want := range p.calls {
				if (ok[method] > 0) != want {
					t.Errorf("driver %s: %d successful %s calls; want some: %v", driverName(p), ok[method], method, want)
				}
			}
		})
	}

	// Through a kubeconfig, as for a cluster elsewhere, and by StorageClass: the cases that
	// need this machine are not applicable, the others run.
	t.Run("kubeconfig", func(t *testing.T) {
		got := runVerify(t, bin, filepath.Join(tmp, "kubeconfig.xml"), false, "--storage-class", driverName(profiles[2]),
			"--kubeconfig", filepath.Join(tmp, "up", "kubeconfig"), "--only", "provision/,data/,attach/,crash/node-agent")
		checkOutcomes(t, got, map[string]string{"provision/immediate": "passed", "provision/wffc": "passed", "attach/detach": "passed",
			"data/persist": "skipped: needs the node's host", "crash/node-agent": "skipped: needs the node's host"})
	})

	// Directory volumes (kubevol's type=dir, as the hostpath driver's) for the size cases:
	// their mounts show the filesystem of the node's root directory, whose size cannot
	// follow the claim. Each case must be not applicable for that reason, after its claim
	// and data checks passed, and not failed.
	t.Run("dir", func(t *testing.T) {
		sizes := []string{"expand/offline", "expand/online", "ephemeral/generic-expand", "clone/larger", "snapshot/restore-larger"}
		got := runVerify(t, bin, filepath.Join(tmp, "dir.xml"), false, "--driver", driverName(profiles[0]), "--dir", filepath.Join(tmp, "up"),
			"--block-parameters", "type=dir", "--only", strings.Join(sizes, ","))
		want := map[string]string{}
		for _, name := range sizes {
			want[name] = "skipped: size not observable: the mount is on the filesystem that holds " + filepath.Join(tmp, "up", "node") + " "
		}
		checkOutcomes(t, got, want)
	})
}

// checkOutcomes compares a run's outcomes with the profile's: "passed", "failed", or
// "skipped: " and text the not-applicable reason must contain.
func checkOutcomes(t *testing.T, got map[string]result, want map[string]string) {
	t.Helper()
	for name, w := range want {
		outcome, reason, _ := strings.Cut(w, ": ")
		if got[name].outcome != outcome || !strings.Contains(got[name].message, reason) {
			t.Errorf("case %s: %s (%q), want %s", name, got[name].outcome, got[name].message, w)
		}
	}
}

// runVerify runs kubevol verify, logs its output and returns the JUnit outcomes; failing
// says the run is meant to exit 1 (failed cases).
func runVerify(t *testing.T, bin, junit string, failing bool, args ...string) map[string]result {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(bin, append([]string{"verify", "--junit", junit}, args...)...).CombinedOutput()
	t.Logf("kubevol verify %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond), out)
	var exit *exec.ExitError
	switch {
	case failing && !(errors.As(err, &exit) && exit.ExitCode() == 1):
		t.Errorf("kubevol verify: %v, want exit code 1 for failed cases", err)
	case !failing && err != nil:
		t.Errorf("kubevol verify: %v", err)
	}
	return readJUnit(t, junit)
}

// succeededCalls counts the successful calls per method in a driver's call log.
func succeededCalls(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c struct{ Method, Code string }
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.Code == "OK" {
			out[c.Method]++
		}
	}
	return out
}

// result is a case's outcome in a JUnit file (passed, failed or skipped) and its failure's
// text or its not-applicable reason.
type result struct{ outcome, message string }

// readJUnit maps each case of a verify JUnit file to its result.
func readJUnit(t *testing.T, path string) map[string]result {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("--junit file: %v", err)
	}
	type message struct {
		Message string `xml:"message,attr"`
		Body    string `xml:",chardata"`
	}
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string   `xml:"name,attr"`
				Failure *message `xml:"failure"`
				Skipped *message `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("--junit file is not JUnit XML: %v", err)
	}
	out := map[string]result{}
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			switch {
			case c.Failure != nil:
				out[c.Name] = result{"failed", c.Failure.Message + "\n" + c.Failure.Body}
			case c.Skipped != nil:
				out[c.Name] = result{"skipped", c.Skipped.Message}
			default:
				out[c.Name] = result{outcome: "passed"}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("--junit file has no test case:\n%s", raw)
	}
	return out
}

func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubevol")
	if err := framework.BuildKubevol(bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// start runs a process that dies with the test binary and is stopped (SIGTERM, then
// SIGKILL) when the test ends.
func start(t *testing.T, bin string, args []string, logPath string) *exec.Cmd {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
		if t.Failed() {
			tail, _ := exec.Command("tail", "-n", "30", logPath).Output()
			t.Logf("%s:\n%s", logPath, tail)
		}
	})
	return cmd
}

// startLoop runs the driver under a shell loop that starts it again whenever it exits, with
// its pid in pidFile: what `--restart-driver "kill $(cat pidFile)"` needs. The loop's own
// SIGTERM stops the driver and the loop.
func startLoop(t *testing.T, bin string, args []string, pidFile, logPath string) {
	t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + a + "'"
	}
	script := fmt.Sprintf(`trap 'kill $(cat %[1]s); exit 0' TERM
while :; do %[2]s %[3]s & echo $! > %[1]s; wait $!; done`, pidFile, bin, strings.Join(quoted, " "))
	start(t, "/bin/sh", []string{"-c", script}, logPath)
}

// runUp starts kubevol up, without waiting for it; SIGINT stops it at the end. The function
// it returns says whether up has exited (its error, or one saying so), nil while it runs.
func runUp(t *testing.T, bin string, args []string, logPath string) func() error {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
		}
		log.Close()
		if t.Failed() {
			tail, _ := exec.Command("tail", "-n", "40", logPath).Output()
			t.Logf("kubevol up:\n%s", tail)
		}
	})
	// Not waiting for up to be ready: the first verify does. An up that exits early
	// shows in its log, printed when the test fails.
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
		}
	}()
	return func() error {
		select {
		case <-done:
			if exitErr == nil {
				return errors.New("exit status 0")
			}
			return exitErr
		default:
			return nil
		}
	}
}

// cannotPass are the cases no profile of this machine can pass, each pinned to its
// not-applicable reason in a profile's outcomes instead.
var cannotPass = map[string]string{
	"selinux/mount": "this kernel has no SELinux",
}

// Every case of verify is required to pass under a profile where it applies, or pinned to
// its not-applicable reason: a bug that reports a case as not applicable shows.
func TestEveryCaseRequired(t *testing.T) {
	for _, name := range verify.CaseNames() {
		passed, pinned := false, false
		for _, p := range profiles {
			passed = passed || p.outcomes[name] == "passed"
			pinned = pinned || strings.HasPrefix(p.outcomes[name], "skipped: ")
		}
		switch {
		case passed && cannotPass[name] != "":
			t.Errorf("case %s passes under a profile, yet is listed as one no profile can pass", name)
		case !passed && cannotPass[name] == "":
			t.Errorf("case %s is required to pass under no profile", name)
		case !passed && !pinned:
			t.Errorf("case %s (%s) is not pinned to its not-applicable reason under any profile", name, cannotPass[name])
		}
	}
}
