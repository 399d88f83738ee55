package verify

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

func snapshotApplies(e *env) string {
	if r := e.lacks(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT); r != "" {
		return r
	}
	if !e.snapshotsServed() {
		return "no snapshotter running: the cluster does not serve snapshot.storage.k8s.io/v1 VolumeSnapshots"
	}
	return ""
}

// snapshotRestore: a VolumeSnapshot of a claim is restored into a new claim that holds the
// data.
func snapshotRestore(k *caseEnv) error {
	want, err := k.filledClaim("source")
	if err != nil {
		return err
	}
	if err := k.snapshot("snap", "source"); err != nil {
		return err
	}
	return k.checkCopy("restored", &corev1.TypedLocalObjectReference{APIGroup: ptr.To(kubecheck.SnapshotGVR.Group), Kind: "VolumeSnapshot", Name: "snap"}, want)
}

func cloneApplies(e *env) string { return e.lacks(csi.ControllerServiceCapability_RPC_CLONE_VOLUME) }

// clone: a claim with another claim as data source holds its data.
func clone(k *caseEnv) error {
	want, err := k.filledClaim("source")
	if err != nil {
		return err
	}
	return k.checkCopy("copy", &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "source"}, want)
}

// filledClaim makes a claim, writes the proof into it through a pod (on this host), and
// deletes the pod, so the data is at rest for a snapshot or a clone.
func (k *caseEnv) filledClaim(name string) (string, error) {
	u, err := k.useClaim(name, classWFFC, defaultSize, "writer")
	if err != nil {
		return "", err
	}
	return u.want, k.deletePod("writer")
}

// checkCopy makes a claim from a source, mounts it and reads the source's proof from it.
func (k *caseEnv) checkCopy(claim string, src *corev1.TypedLocalObjectReference, want string) error {
	if _, err := k.claim(claim, classWFFC, defaultSize, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce, src); err != nil {
		return err
	}
	return k.reuse(&inUse{vols: []corev1.Volume{kubecheck.ClaimVolume("data", claim)}, want: want}, claim, "reader")
}
