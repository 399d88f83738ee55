package resizer

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// Names shared with external-resizer and kube-controller-manager, so that kubevol and
// upstream can take over each other's claims.
const (
	// AnnStorageResizer is set on a claim by kube-controller-manager's expander controller
	// ("persistentvolume-expander-controller") to name the resizer of a CSI volume. A claim
	// that names another resizer is left alone.
	AnnStorageResizer = "volume.kubernetes.io/storage-resizer"

	leasePrefix = "external-resizer-"

	expandCapability = csi.ControllerServiceCapability_RPC_EXPAND_VOLUME
	multiWriterCap   = csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER
	modifyCapability = csi.ControllerServiceCapability_RPC_MODIFY_VOLUME
)

// LeaseName is the leader election Lease of the resizer of driver, the name external-resizer
// derives, so that kubevol and upstream replicas share one election.
func LeaseName(driver string) string { return leasePrefix + csiclient.SanitizeDriverName(driver) }

// Event reasons on the claim, as external-resizer records them.
const (
	reasonResizing       = "Resizing"
	reasonFailed         = "VolumeResizeFailed"
	reasonFSResizeNeeded = "FileSystemResizeRequired"
	reasonSucceeded      = "VolumeResizeSuccessful"
)

// fsResizePendingMessage is the FileSystemResizePending condition's message; the kubelet and
// `kubectl describe` users know it from upstream.
const fsResizePendingMessage = "Waiting for user to (re-)start a pod to finish file system resize of volume on node."

// resizeConditions are the claim conditions this controller and the node own; other
// conditions (ModifyVolume ones, for example) are kept as they are.
var resizeConditions = map[corev1.PersistentVolumeClaimConditionType]bool{
	corev1.PersistentVolumeClaimResizing:                true,
	corev1.PersistentVolumeClaimFileSystemResizePending: true,
	corev1.PersistentVolumeClaimControllerResizeError:   true,
	corev1.PersistentVolumeClaimNodeResizeError:         true,
}

// Resizing reports a condition of an expansion still under way or failed on the claim,
// which a finished expansion removes (the resizer's and the kubelet's contract, as
// upstream's volume-expand suite checks it).
func Resizing(pvc *corev1.PersistentVolumeClaim) bool {
	for _, c := range pvc.Status.Conditions {
		if resizeConditions[c.Type] {
			return true
		}
	}
	return false
}
