// Package framework is the shared harness of kubevol's end-to-end tests: one real local
// control plane per test package (internal/cluster/localcluster), unique namespaces per test, and
// kubevol processes that are always stopped, also when a test fails or is interrupted.
//
// A test package uses it from TestMain:
//
//	func TestMain(m *testing.M) { framework.Main(m) }
package framework

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
)

var (
	cluster    *localcluster.Cluster
	clusterDir string
)

// Main starts the package's shared cluster, runs the tests and stops the cluster. SIGINT and
// SIGTERM stop it too; and if the test binary is killed outright, the kernel kills the
// control plane with it (see localcluster).
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e tests need root (mounts, loop devices); run them with sudo")
		return 1
	}
	var err error
	clusterDir, err = os.MkdirTemp("", "kubevol-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(clusterDir)

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute) // includes a cold build
	defer cancel()
	start := time.Now()
	cluster, err = localcluster.Start(ctx, localcluster.Options{Dir: clusterDir, Progress: os.Stderr, UnsafeNoFsync: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: start local cluster: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: local cluster ready in %s (%s)\n", time.Since(start).Round(100*time.Millisecond), clusterDir)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "e2e: %v: stopping everything\n", s)
		runCleanups()
		_ = cluster.Stop()
		os.Exit(130)
	}()

	code := m.Run()
	runCleanups()
	if code != 0 {
		dumpLogs()
	}
	if err := cluster.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stop local cluster: %v\n", err)
		return 1
	}
	return code
}

// Cluster is the package's shared control plane.
func Cluster() *localcluster.Cluster { return cluster }

// RESTConfig is an admin client config without client-side throttling.
func RESTConfig() *rest.Config { return cluster.RESTConfig() }

// Client returns an admin clientset.
func Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Namespace creates a namespace unique to the test and deletes it when the test ends.
func Namespace(t testing.TB) string {
	t.Helper()
	cs := Client(t)
	prefix := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: strings.Trim(prefix, "-") + "-" + rand.String(5)}}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		err := cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// Context returns a context that ends with the test, or after timeout.
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

// addProcessCleanup registers a last-resort cleanup that also runs on SIGINT/SIGTERM.
func addProcessCleanup(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, f)
}

func runCleanups() {
	cleanupMu.Lock()
	fs := cleanups
	cleanups = nil
	cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func dumpLogs() {
	for _, c := range []string{localcluster.APIServer, localcluster.ControllerManager} {
		fmt.Fprintf(os.Stderr, "e2e: %s log: %s\n", c, cluster.LogPath(c))
	}
}
