package provision

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/cluster/proc"
	"github.com/kubevol/kubevol/internal/testing/memdriver"
)

const topologyKey = "topology.kubevol.io/node"

// system is the software under test: a kubevol driver and a kubevol provisioner, run as
// child processes so that the provisioner's CPU and memory are its own.
type system struct {
	cs      kubernetes.Interface
	cfg     Config
	dir     string
	driver  string
	node    string
	class   string
	socket  string
	ns      string
	http    string
	drv     *exec.Cmd
	prov    *exec.Cmd
	stopMem func()
	// upstream is upstream's csi-provisioner binary to run instead of kubevol's.
	upstream string
	logFiles []*os.File
}

func startSystem(ctx context.Context, cs kubernetes.Interface, cfg Config, ns string) (*system, error) {
	id := strings.ToLower(rand.String(5))
	s := &system{cs: cs, cfg: cfg, driver: "bench-" + id + ".kubevol.io", node: "bench-node-" + id, class: "bench-" + id, ns: ns}
	var err error
	if s.dir, err = os.MkdirTemp("", "kubevol-bench-provision-"); err != nil {
		return nil, err
	}
	s.socket = "unix://" + filepath.Join(s.dir, "csi.sock")
	ok := false
	defer func() {
		if !ok {
			s.stop()
		}
	}()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.node, Labels: map[string]string{topologyKey: s.node}}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := cs.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: s.node}, Spec: storagev1.CSINodeSpec{
		Drivers: []storagev1.CSINodeDriver{{Name: s.driver, NodeID: s.node, TopologyKeys: []string{topologyKey}}}}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: s.class}, Provisioner: s.driver}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	switch cfg.Driver {
	case DriverMemory:
		d := &memdriver.Driver{Name: s.driver, Topology: true, Capacity: 1 << 50}
		if s.stopMem, err = d.Serve(filepath.Join(s.dir, "csi.sock")); err != nil {
			return nil, err
		}
	default:
		if s.drv, err = s.start("driver", "driver", "--endpoint", s.socket, "--node-id", s.node, "--state-dir", filepath.Join(s.dir, "state"),
			"--mode", "controller", "--drivername", s.driver, "--capacity", "1Pi"); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

func (s *system) start(name string, args ...string) (*exec.Cmd, error) {
	return s.startBinary(name, s.cfg.Binary, args...)
}

func (s *system) startBinary(name, binary string, args ...string) (*exec.Cmd, error) {
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	s.logFiles = append(s.logFiles, log)
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start kubevol %s: %w", name, err)
	}
	return cmd, nil
}

func (s *system) startProvisioner(ctx context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.http = l.Addr().String()
	l.Close()
	qps, burst := strconv.FormatFloat(s.cfg.KubeAPIQPS, 'f', -1, 64), strconv.Itoa(s.cfg.KubeAPIBurst)
	if s.upstream != "" {
		// The same client limits and workers as kubevol's (upstream's own 5 QPS would measure
		// its rate limiter), and its topology gate, as kubevol reads the driver's topology
		// whenever the driver has it.
		args := []string{"--csi-address", s.socket, "--kubeconfig", s.cfg.Kubeconfig, "--http-endpoint", s.http,
			"--kube-api-qps", qps, "--kube-api-burst", burst, "--worker-threads", "100", "--feature-gates", "Topology=true"}
		s.prov, err = s.startBinary("upstream-provisioner", s.upstream, args...)
	} else {
		args := append([]string{"provisioner", "--csi-address", s.socket, "--kubeconfig", s.cfg.Kubeconfig,
			"--intent-namespace", s.ns, "--http-endpoint", s.http, "--kube-api-qps", qps, "--kube-api-burst", burst}, s.cfg.ProvisionerArgs...)
		s.prov, err = s.start("provisioner", args...)
	}
	if err != nil {
		return err
	}
	// Ready when it serves metrics; the claims it finds then are its backlog.
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		rsp, err := http.Get("http://" + s.http + "/healthz")
		if err != nil {
			return false, nil
		}
		rsp.Body.Close()
		return true, nil
	})
}

// cpu is the provisioner's user plus system CPU time.
func (s *system) cpu() (time.Duration, error) {
	if s.prov == nil {
		return 0, nil
	}
	u, err := proc.ReadUsage(s.prov.Process.Pid)
	return u.CPU, err
}

// rss reads a memory figure of the provisioner from /proc/PID/status (VmRSS:, VmHWM:), in bytes.
func (s *system) rss(field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.prov.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, s.prov.Process.Pid)
}

var sumCountRE = regexp.MustCompile(`(?m)^(\w+)_(sum|count)\{([^}]*)\} ([0-9.e+-]+)$`)

// ownTimes reads the provisioner's own view from its metrics: the average time a claim
// waited in the queue and the average time to provision (CSI call plus PV save).
func (s *system) ownTimes() (string, error) {
	rsp, err := http.Get("http://" + s.http + "/metrics")
	if err != nil {
		return "", err
	}
	defer rsp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(rsp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	vals := map[string]float64{}
	for _, m := range sumCountRE.FindAllStringSubmatch(b.String(), -1) {
		v, _ := strconv.ParseFloat(m[4], 64)
		vals[m[1]+"|"+m[3]+"|"+m[2]] += v
	}
	avg := func(metric, labels string) time.Duration {
		n := vals[metric+"|"+labels+"|count"]
		if n == 0 {
			return 0
		}
		return time.Duration(vals[metric+"|"+labels+"|sum"] / n * float64(time.Second))
	}
	var provLabels string
	for k := range vals {
		if strings.HasPrefix(k, "controller_persistentvolumeclaim_provision_duration_seconds|") {
			provLabels = strings.Split(k, "|")[1]
			break
		}
	}
	createLabels := `driver_name="` + s.driver + `",grpc_status_code="OK",method_name="/csi.v1.Controller/CreateVolume"`
	return fmt.Sprintf("provisioner's own time per claim (averages from its metrics): queue wait %s, provisioning (prepare + CreateVolume + PV save) %s, CreateVolume %s (%.0f calls)",
		avg("workqueue_queue_duration_seconds", `name="claims"`).Round(time.Microsecond),
		avg("controller_persistentvolumeclaim_provision_duration_seconds", provLabels).Round(time.Microsecond),
		avg("csi_sidecar_operations_seconds", createLabels).Round(time.Microsecond), vals["csi_sidecar_operations_seconds|"+createLabels+"|count"]), nil
}

func (s *system) stop() {
	for _, c := range []*exec.Cmd{s.prov, s.drv} {
		if c != nil && c.Process != nil {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
				<-done
			}
		}
	}
	if s.stopMem != nil {
		s.stopMem()
	}
	for _, f := range s.logFiles {
		f.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.cs.StorageV1().StorageClasses().Delete(ctx, s.class, metav1.DeleteOptions{})
	_ = s.cs.StorageV1().CSINodes().Delete(ctx, s.node, metav1.DeleteOptions{})
	_ = s.cs.CoreV1().Nodes().Delete(ctx, s.node, metav1.DeleteOptions{})
	os.RemoveAll(s.dir)
}
