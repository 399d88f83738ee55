package localcluster

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// One cluster, started, stopped, restarted on the same state and stopped again: objects and
// ports survive the restart, and after each Stop no process and no listening port is left.
func TestStartStopRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test starts a control plane and must run as root, like the rest of the suite")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute) // may include a cold build
	defer cancel()
	dir := t.TempDir()
	opts := Options{Dir: dir, Progress: testWriter{t}, UnsafeNoFsync: true}

	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })

	// The kubeconfig written for users works on its own.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survives-restart", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create through the admin kubeconfig: %v", err)
	}
	for _, s := range c.Status(ctx) {
		if !s.Running || !s.Healthy {
			t.Errorf("%s not healthy after Start: %+v", s.Name, s)
		}
	}
	if got := len(c.Status(ctx)); got != 4 {
		t.Errorf("Status lists %d components, want 4", got)
	}
	ports, pids := c.Ports(), c.PIDs()
	stopAndCheck(t, c, pids, ports)

	c2, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("restart on the same state: %v", err)
	}
	t.Cleanup(func() { _ = c2.Stop() })
	if c2.Ports() != ports {
		t.Errorf("restart picked new ports %+v, want the saved %+v so existing kubeconfigs keep working", c2.Ports(), ports)
	}
	got, err := kubernetes.NewForConfigOrDie(c2.RESTConfig()).CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("object lost across restart: %v %v", got, err)
	}

	// Respawn refuses a running component and brings back one that was killed.
	if err := c2.Respawn(ctx, Scheduler); err == nil {
		t.Error("Respawn of a running scheduler succeeded")
	}
	old := c2.Process(Scheduler)
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Respawn(ctx, Scheduler); err != nil {
		t.Fatalf("Respawn after SIGKILL: %v", err)
	}
	if p := c2.Process(Scheduler); p == old || p.Exited() {
		t.Error("Respawn did not replace the scheduler's process")
	}
	stopAndCheck(t, c2, c2.PIDs(), c2.Ports())
	if err := c2.Respawn(ctx, Scheduler); err == nil {
		t.Error("Respawn on a stopped cluster succeeded")
	}
	if err := c2.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func stopAndCheck(t *testing.T, c *Cluster, pids []int, ports Ports) {
	t.Helper()
	if len(pids) != 4 {
		t.Fatalf("%d component processes, want 4", len(pids))
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Stop (kill -0: %v)", pid, err)
		}
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group %d still has members after Stop (kill -0: %v)", pid, err)
		}
	}
	for _, p := range []int{ports.Etcd, ports.EtcdPeer, ports.APIServer, ports.ControllerManager, ports.Scheduler} {
		if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second); err == nil {
			conn.Close()
			t.Errorf("port %d still accepts connections after Stop", p)
		}
	}
}

func TestStartRequiresDir(t *testing.T) {
	if _, err := Start(context.Background(), Options{}); err == nil {
		t.Fatal("Start without a Dir succeeded")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
