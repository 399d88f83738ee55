// Package kubeletvm runs kubevol's volume manager (pkg/volumemanager) as the kubelet's own:
// it implements the kubelet's VolumeManager interface on it. The kubelet keeps everything
// else: its pod workers start containers once WaitForAttachAndMount returns, with the
// paths GetMountedVolumesForPod gives; its plugin watcher registers CSI drivers and writes
// the CSINode; its secret, configMap and certificate managers serve its own needs.
//
// The kubelet has no plug point for its volume manager, so this package builds only against
// a k8s.io/kubernetes changed by kubevol's build overlay (internal/cluster/kubeletoverlay), which
// adds the hook Install sets. kubevol-cluster is built that way; another kubelet build can
// do the same: generate the overlay, build with its -modfile and -overlay flags, and call
// Install (or InstallFromEnv) from an init function of its main package.
package kubeletvm

import (
	"fmt"
	"os"

	kvm "k8s.io/kubernetes/pkg/kubelet/volumemanager"
)

// Env chooses the volume manager of a kubelet built with this package: "kubevol" for
// kubevol's, "kubelet" (or unset) for the stock one. Kubelet flags are strict, so the choice
// is not a flag.
const Env = "KUBEVOL_VOLUME_MANAGER"

// InstallFromEnv installs kubevol's volume manager when $KUBEVOL_VOLUME_MANAGER says so,
// and stops the process with a message when it holds anything else than kubevol or kubelet.
func InstallFromEnv() {
	switch v := os.Getenv(Env); v {
	case "", "kubelet":
	case "kubevol":
		Install()
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want kubevol or kubelet\n", Env, v)
		os.Exit(2)
	}
}

// Install makes the kubelet build kubevol's volume manager instead of its own.
func Install() { kvm.Replacement = New }
