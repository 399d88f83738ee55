// Package up tests `kubevol up` as a user runs it: the binary in a terminal-less process,
// the printed kubectl line, a healthy stack, and nothing left after SIGINT.
package up

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubevol/kubevol/internal/cluster/proc"
)

func TestUpThenInterrupt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("kubevol up needs root (mounts); run the tests as root")
	}
	bin := kubevolBinary(t)
	dir := t.TempDir()
	r := startUp(t, bin, "--dir", dir, "--node-name", "up-e2e", "--status-interval", "500ms")
	cmd, line := r.cmd, r.line
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if want := "kubectl --kubeconfig " + kubeconfig + " get nodes"; line != want {
		t.Errorf("stdout line = %q, want %q", line, want)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		t.Fatalf("/readyz = %q, %v", body, err)
	}
	for _, obj := range []func() error{
		func() error {
			_, err := cs.CoreV1().Namespaces().Get(ctx, "kubevol-system", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.StorageV1().StorageClasses().Get(ctx, "kubevol-local", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.StorageV1().CSIDrivers().Get(ctx, "local.kubevol.io", metav1.GetOptions{})
			return err
		},
	} {
		if err := obj(); err != nil {
			t.Errorf("kubevol up did not install its objects: %v", err)
		}
	}
	// The group contents are served in every version through up's conversion webhook.
	converted := checkGroupConversion(ctx, t, cfg)
	// The node agent runs as its node, with the certificate it obtained through a CSR.
	assertNodeCredential(ctx, t, filepath.Join(dir, "node.kubeconfig"), "up-e2e")
	pids := descendants(cmd.Process.Pid)
	// Each sidecar runs as its own ServiceAccount, with a token and nothing of the admin's.
	for _, role := range []string{"provisioner", "attacher", "resizer", "snapshotter"} {
		assertRunsAs(ctx, t, pids, role, "system:serviceaccount:kubevol-system:kubevol-up-"+role)
	}
	if len(pids) < 9 {
		t.Errorf("kubevol up runs %d processes, want at least 9 (4 control plane + 5 kubevol): %v", len(pids), pids)
	}

	r.interrupt(t)
	assertNothingLeft(t, pids, dir)

	// A second start finds its ServiceAccounts and RBAC and updates them, and the sidecars
	// run as themselves again, with new tokens.
	r = startUp(t, bin, "--dir", dir, "--node-name", "up-e2e", "--status-interval", "500ms")
	pids = descendants(r.cmd.Process.Pid)
	for _, role := range []string{"provisioner", "snapshotter"} {
		assertRunsAs(ctx, t, pids, role, "system:serviceaccount:kubevol-system:kubevol-up-"+role)
	}
	checkStillConverted(ctx, t, cfg, converted)
	r.interrupt(t)
}

// assertNodeCredential checks that kubeconfig authenticates as the Node node.
func assertNodeCredential(ctx context.Context, t *testing.T, kubeconfig, node string) {
	t.Helper()
	nodeCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubernetes.NewForConfigOrDie(nodeCfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || review.Status.UserInfo.Username != "system:node:"+node {
		t.Errorf("the credential of node %s (%s): %v %v", node, kubeconfig, review, err)
	}
}

// assertNothingLeft checks, once kubevol up has exited, that none of its processes pids
// runs and that nothing under its state directory dir is mounted or backs a loop device.
func assertNothingLeft(t *testing.T, pids []int, dir string) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d outlived kubevol up", pid)
		}
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), dir) {
		t.Errorf("mounts under %s left after kubevol up stopped", dir)
	}
	if out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output(); err != nil {
		t.Errorf("losetup: %v", err)
	} else if strings.Contains(string(out), dir) {
		t.Errorf("loop devices on images under %s left:\n%s", dir, out)
	}
}

// assertRunsAs checks that the kubevol process of role among pids has a kubeconfig whose
// only credential is a token of user, and that it is not allowed what an admin is.
func assertRunsAs(ctx context.Context, t *testing.T, pids []int, role, user string) {
	t.Helper()
	var kubeconfig string
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) < 2 || args[1] != role {
			continue
		}
		for i, a := range args {
			if a == "--kubeconfig" && i+1 < len(args) {
				kubeconfig = args[i+1]
			}
		}
	}
	if kubeconfig == "" {
		t.Errorf("no kubevol %s process with --kubeconfig", role)
		return
	}
	loaded, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ai := loaded.AuthInfos[loaded.Contexts[loaded.CurrentContext].AuthInfo]
	if ai == nil || ai.TokenFile == "" || ai.ClientCertificate != "" || len(ai.ClientCertificateData) > 0 || ai.ClientKey != "" || len(ai.ClientKeyData) > 0 {
		t.Errorf("the %s's kubeconfig %s holds more than a token file: %+v", role, kubeconfig, ai)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || review.Status.UserInfo.Username != user {
		t.Errorf("the %s runs as %v (%v), want %s", role, review, err, user)
	}
	sar, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "kube-system"}}}, metav1.CreateOptions{})
	if err != nil || sar.Status.Allowed {
		t.Errorf("the %s may read kube-system's secrets (%v, %v): it has more than its RBAC", role, sar, err)
	}
}

// upRun is a `kubevol up` started by a test, killed when the test ends.
type upRun struct {
	cmd    *exec.Cmd
	exited chan error // receives the exit once
	log    string     // its stderr
	line   string     // the one line on stdout, printed once the stack is ready
}

// startUp runs `kubevol up args...` and waits until it is ready: the one line on stdout is
// the exact command to run.
func startUp(t *testing.T, bin string, args ...string) *upRun {
	t.Helper()
	return startUpWith(t, nil, bin, args...)
}

// startUpWith is startUp with setup, if set, applied to the command before it starts (its
// environment, its working directory).
func startUpWith(t *testing.T, setup func(*exec.Cmd), bin string, args ...string) *upRun {
	t.Helper()
	r := &upRun{log: filepath.Join(t.TempDir(), "up.log"), exited: make(chan error, 1)}
	stderr, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stderr.Close() })
	r.cmd = exec.Command(bin, append([]string{"up"}, args...)...)
	r.cmd.Stderr = stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if setup != nil {
		setup(r.cmd)
	}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("kubevol up output:\n%s", proc.LogTail(r.log, 150))
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
		}
	}()
	select {
	case r.line = <-lines:
	case err := <-r.exited:
		t.Fatalf("kubevol up exited before it was ready: %v", err)
	case <-time.After(45 * time.Minute): // a cold first run builds the control plane
		t.Fatal("kubevol up never printed its kubectl line")
	}
	return r
}

// interrupt sends SIGINT, as Ctrl-C does, and expects up to stop everything and exit 0.
func (r *upRun) interrupt(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.exited:
		if err != nil {
			t.Errorf("kubevol up exited with %v after SIGINT, want 0", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("kubevol up did not exit within 2 minutes of SIGINT")
	}
}

// descendants lists every process below pid, read from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		var self, parent int
		if _, err := fmt.Sscan(e.Name(), &self); err != nil || len(f) < 2 {
			continue
		}
		if _, err := fmt.Sscan(f[1], &parent); err != nil {
			continue
		}
		children[parent] = append(children[parent], self)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
