// Command kubevol-cluster is a multi-call binary that links the upstream control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) so that kubevol's local
// cluster and its end-to-end tests run real upstream code. It is a test and development
// tool; it is never deployed.
package main

import (
	"fmt"
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

const usage = "usage: kubevol-cluster etcd|kube-apiserver|kube-controller-manager|kube-scheduler [flags]"

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
	default:
		fmt.Fprintf(os.Stderr, "kubevol-cluster: unknown component %q\n%s\n", component, usage)
		os.Exit(2)
	}
}
