// Package target picks the cluster a benchmark runs against: the one a kubeconfig names, the
// `kubevol up` cluster when it is running, or a throwaway local control plane.
package target

import (
	"context"
	"fmt"
	"io"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubevol/kubevol/internal/localcluster"
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
		return &Cluster{Config: c, Kubeconfig: kubeconfig, Stop: func() {}}, nil
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
		NodeKubeconfig: cl.NodeKubeconfig}, nil
}
