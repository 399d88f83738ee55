// Package target picks the cluster a benchmark runs against: the one a kubeconfig names, the
// `kubevol up` cluster when it is running, or a throwaway local control plane.
package target

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
)

// UpKubeconfig is where `kubevol up` keeps its kubeconfig by default.
const UpKubeconfig = "/var/lib/kubevol/up/kubeconfig"

// Cluster is a benchmark's cluster.
type Cluster struct {
	Config     *rest.Config
	Kubeconfig string
	// Stop releases a cluster the benchmark started; it does nothing otherwise.
	Stop func()
	// NodeKubeconfig, when the benchmark holds the cluster's CA (a cluster it started),
	// mints a system:node:<name> credential; nil otherwise.
	NodeKubeconfig func(nodeName string) (string, error)
	// APIServerPID is the process ID of the cluster's kube-apiserver when it runs on this
	// machine (a cluster the benchmark started, or `kubevol up`'s), else 0.
	APIServerPID func() int
}

// Pick returns the cluster of kubeconfig, else of `kubevol up`, else a new local one.
func Pick(ctx context.Context, kubeconfig string, out io.Writer) (*Cluster, error) {
	if kubeconfig == "" {
		if _, err := os.Stat(UpKubeconfig); err == nil {
			kubeconfig = UpKubeconfig
		}
	}
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, err
		}
		return &Cluster{Config: c, Kubeconfig: kubeconfig, Stop: func() {}, APIServerPID: func() int { return localAPIServer(c.Host) }}, nil
	}
	dir, err := os.MkdirTemp("", "kubevol-bench-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "starting a local cluster for the benchmark")
	cl, err := localcluster.Start(ctx, localcluster.Options{Dir: dir, Progress: out, UnsafeNoFsync: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Cluster{Config: cl.RESTConfig(), Kubeconfig: cl.KubeconfigPath(), Stop: func() { _ = cl.Stop(); os.RemoveAll(dir) },
		NodeKubeconfig: cl.NodeKubeconfig, APIServerPID: func() int {
			if p := cl.Process(localcluster.APIServer); p != nil && !p.Exited() {
				return p.PID()
			}
			return 0
		}}, nil
}

// localAPIServer finds the kube-apiserver process that serves host (https://127.0.0.1:<port>
// or localhost) on this machine: the one started with --secure-port=<port>. 0 if host is
// not local or no such process runs.
func localAPIServer(host string) int {
	u, err := url.Parse(host)
	if err != nil || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" && u.Hostname() != "::1") {
		return 0
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		isAPIServer, onPort := false, false
		for i, a := range args {
			// argv[0] is kube-apiserver, or argv[1] of the multi-call kubevol-cluster binary.
			if i < 2 && filepath.Base(a) == localcluster.APIServer {
				isAPIServer = true
			}
			if a == "--secure-port="+port {
				onPort = true
			}
		}
		if isAPIServer && onPort {
			return pid
		}
	}
	return 0
}
