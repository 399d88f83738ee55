// Command kubevol-cluster is a multi-call binary that links the upstream control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and the kubelet, so that
// kubevol's local cluster and its end-to-end tests run real upstream code. It is a test and
// development tool; it is never deployed.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	componentversion "k8s.io/component-base/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	"github.com/kubevol/kubevol/internal/runtime/version"
)

const usage = "usage: kubevol-cluster etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet [flags] | version"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	component, args := os.Args[1], os.Args[2:]
	switch component {
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
	case "kube-apiserver":
		os.Args = append([]string{component}, args...)
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Args = append([]string{component}, args...)
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Args = append([]string{component}, args...)
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kubelet":
		// The node of `kubevol up --runtime containerd`; its command needs a live context.
		os.Args = append([]string{component}, args...)
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "version":
		// The kubevol release this binary belongs to, first: kubevol up runs only a control
		// plane of its own release (internal/cluster/localcluster.CheckBinary).
		fmt.Printf("kubevol-cluster %s (Kubernetes %s, %s, %s/%s)\n", version.Get(), componentversion.Get().GitVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	default:
		fmt.Fprintf(os.Stderr, "kubevol-cluster: unknown component %q\n%s\n", component, usage)
		os.Exit(2)
	}
}
