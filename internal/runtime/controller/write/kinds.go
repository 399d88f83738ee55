package write

import (
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"
)

// Claims is a Writer of PersistentVolumeClaims with verb (and statusVerb on their status).
func Claims(cs kubernetes.Interface, verb, statusVerb Verb) Writer[*corev1.PersistentVolumeClaim] {
	return Writer[*corev1.PersistentVolumeClaim]{
		Client: func(ns string) Client[*corev1.PersistentVolumeClaim] {
			return cs.CoreV1().PersistentVolumeClaims(ns)
		},
		Resource: "persistentvolumeclaims", Verb: verb, StatusVerb: statusVerb,
	}
}

// PersistentVolumes is a Writer of PersistentVolumes with verb.
func PersistentVolumes(cs kubernetes.Interface, verb Verb) Writer[*corev1.PersistentVolume] {
	return Writer[*corev1.PersistentVolume]{
		Client: func(string) Client[*corev1.PersistentVolume] {
			return cs.CoreV1().PersistentVolumes()
		},
		Resource: "persistentvolumes", Verb: verb, StatusVerb: verb,
	}
}

// VolumeAttachments is a Writer of VolumeAttachments with verb, on their status too.
func VolumeAttachments(cs kubernetes.Interface, verb Verb) Writer[*storagev1.VolumeAttachment] {
	return Writer[*storagev1.VolumeAttachment]{
		Client: func(string) Client[*storagev1.VolumeAttachment] {
			return cs.StorageV1().VolumeAttachments()
		},
		Resource: "volumeattachments", Verb: verb, StatusVerb: verb,
	}
}

// Rereading is w with the Reread conflict policy.
func (w Writer[T]) Rereading() Writer[T] {
	w.Conflict = Reread
	return w
}

// ClaimFinalizers writes the finalizers of claims with UPDATE, the only claim write the
// upstream roles of external-provisioner and snapshot-controller grant. The claim read is
// usually an informer's copy that may lag a write of someone else, so a conflict is
// retried from a fresh GET (both roles grant get): one stale cache must not leave a
// finalizer behind until the next resync.
func ClaimFinalizers(cs kubernetes.Interface) Writer[*corev1.PersistentVolumeClaim] {
	return Claims(cs, Update, Update).Rereading()
}

// Nodes is a Writer of Nodes that patches, the verb the kubelet's role (system:node)
// grants on nodes and nodes/status.
func Nodes(cs kubernetes.Interface) Writer[*corev1.Node] {
	return Writer[*corev1.Node]{
		Client:   func(string) Client[*corev1.Node] { return cs.CoreV1().Nodes() },
		Resource: "nodes", Verb: Patch, StatusVerb: Patch,
	}
}

// Pods is a Writer of Pods that patches their status, as the kubelet's status manager does.
func Pods(cs kubernetes.Interface) Writer[*corev1.Pod] {
	return Writer[*corev1.Pod]{
		Client:   func(ns string) Client[*corev1.Pod] { return cs.CoreV1().Pods(ns) },
		Resource: "pods", Verb: Patch, StatusVerb: Patch,
	}
}
