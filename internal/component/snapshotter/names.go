// Package snapshotter is the contract kubevol's two snapshot roles share with each other and
// with kubernetes-csi/external-snapshotter: the annotation, finalizer, label and Lease names,
// the names of dynamic and member objects, the rules for the snapshotter secrets and class
// parameters, and which volumes may be a snapshot's source and which classes are default.
// Objects written by either upstream component are understood by both roles, and the other
// way round. The roles are internal/component/snapshotter/snapshotcontroller (the
// snapshot-controller: VolumeSnapshots, binding, finalizers; groupcontroller for groups) and
// internal/component/snapshotter/csisnapshotter (the csi-snapshotter sidecar: CSI calls and
// the content's status; groupsidecar for groups).
package snapshotter

import (
	"fmt"
	"slices"
	"strings"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapscheme "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/scheme"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kubevol/kubevol/internal/component/provisioner/secrets"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// The event recorders find the kind and version of an object in client-go's scheme: without
// the snapshot types there, every event on a snapshot or content would be dropped.
// The same scheme holds the group snapshot types.
func init() { utilruntime.Must(snapscheme.AddToScheme(scheme.Scheme)) }

// Annotations, finalizers and labels of external-snapshotter.
const (
	// FinalizerContentBound keeps a bound content until the sidecar has dealt with the
	// backend snapshot.
	FinalizerContentBound = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
	// FinalizerSnapshotAsSource is on every VolumeSnapshot; it blocks deletion while a claim
	// restores from it.
	FinalizerSnapshotAsSource = "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection"
	// FinalizerSnapshotBound keeps a bound VolumeSnapshot of a Delete-policy content until the
	// content (and so the backend snapshot) is gone.
	FinalizerSnapshotBound = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
	// FinalizerPVCAsSource protects the source claim while a snapshot of it is not ready.
	FinalizerPVCAsSource = "snapshot.storage.kubernetes.io/pvc-as-source-protection"

	// AnnBeingDeleted on a content says its VolumeSnapshot is being deleted, so the sidecar
	// may act on the content's deletion.
	AnnBeingDeleted = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
	// AnnBeingCreated on a content says a CreateSnapshot may be in flight: the content must
	// not be released until its outcome is known.
	AnnBeingCreated = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
	// AnnDeletionSecretName and AnnDeletionSecretNamespace freeze the snapshotter secret of a
	// content for CreateSnapshot and DeleteSnapshot.
	AnnDeletionSecretName      = "snapshot.storage.kubernetes.io/deletion-secret-name"
	AnnDeletionSecretNamespace = "snapshot.storage.kubernetes.io/deletion-secret-namespace"
	// AnnDefaultClass marks the default VolumeSnapshotClass of a driver ("true" only).
	AnnDefaultClass = "snapshot.storage.kubernetes.io/is-default-class"
	// AnnGroupSnapshotHandle marks a member of a group snapshot: no CreateSnapshot for it.
	AnnGroupSnapshotHandle = "groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle"
	// LabelManagedBy names the node whose csi-snapshotter handles a dynamic content: the
	// snapshot-controller with --enable-distributed-snapshotting sets it, a csi-snapshotter
	// with --node-deployment lists only its node's contents.
	LabelManagedBy = "snapshot.storage.kubernetes.io/managed-by"

	// ContentPrefix names dynamic contents: snapcontent-<VolumeSnapshot UID>.
	ContentPrefix = "snapcontent-"

	// ControllerLease is the snapshot-controller's leader election Lease.
	ControllerLease    = "snapshot-controller-leader"
	sidecarLeasePrefix = "external-snapshotter-leader-"
)

// SidecarLease is the csi-snapshotter's Lease for driver, as upstream derives it.
func SidecarLease(driver string) string {
	return sidecarLeasePrefix + csiclient.SanitizeDriverName(strings.ReplaceAll(driver, "/", "-"))
}

// ContentName is the name of the dynamic content of the VolumeSnapshot with uid.
func ContentName(vs *snapv1.VolumeSnapshot) string { return ContentPrefix + string(vs.UID) }

// HasFinalizer reports whether m has finalizer f.
func HasFinalizer(m metav1.Object, f string) bool { return slices.Contains(m.GetFinalizers(), f) }

// Without returns list without s.
func Without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// Class parameter keys of the snapshotter secrets (csi.storage.k8s.io/ prefix).
const (
	paramSecretName          = secrets.Prefix + "snapshotter-secret-name"
	paramSecretNamespace     = secrets.Prefix + "snapshotter-secret-namespace"
	paramListSecretName      = secrets.Prefix + "snapshotter-list-secret-name"
	paramListSecretNamespace = secrets.Prefix + "snapshotter-list-secret-namespace"
)

// reserved are the csi.storage.k8s.io/ keys a VolumeSnapshotClass may carry: the snapshotter
// reads them and never passes them to the driver.
var reserved = map[string]bool{
	paramSecretName: true, paramSecretNamespace: true, paramListSecretName: true, paramListSecretNamespace: true,
	secrets.Prefix + "group-snapshotter-secret-name": true, secrets.Prefix + "group-snapshotter-secret-namespace": true,
	secrets.Prefix + "group-snapshotter-get-secret-name": true, secrets.Prefix + "group-snapshotter-get-secret-namespace": true,
}

// Parameters returns the class parameters for CreateSnapshot: without the reserved keys, and
// an error naming any other key of the reserved csi.storage.k8s.io/ prefix.
func Parameters(class *snapv1.VolumeSnapshotClass) (map[string]string, error) {
	return classParameters("VolumeSnapshotClass", class.Name, class.Parameters)
}

func classParameters(kind, name string, params map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range params {
		if reserved[k] {
			continue
		}
		if strings.HasPrefix(k, secrets.Prefix) {
			return nil, fmt.Errorf("%s %s has the unknown parameter %q in the reserved prefix %s: remove it", kind, name, k, secrets.Prefix)
		}
		out[k] = v
	}
	return out, nil
}

// SnapshotSecret resolves the snapshotter secret of a new content from the class, with the
// variables upstream allows: ${volumesnapshotcontent.name}, ${volumesnapshot.name} and
// ${volumesnapshot.namespace} in the name, and only the content name and the snapshot's
// namespace in the namespace. nil means the class names no secret.
func SnapshotSecret(class *snapv1.VolumeSnapshotClass, contentName string, vs *snapv1.VolumeSnapshot) (*corev1.SecretReference, error) {
	return secretRef(class, "snapshotter", paramSecretName, paramSecretNamespace,
		map[string]string{"volumesnapshotcontent.name": contentName, "volumesnapshot.name": vs.Name, "volumesnapshot.namespace": vs.Namespace},
		map[string]string{"volumesnapshotcontent.name": contentName, "volumesnapshot.namespace": vs.Namespace})
}

// ListSecret resolves the secret for ListSnapshots of a pre-provisioned content; only the
// content's name is known then.
func ListSecret(class *snapv1.VolumeSnapshotClass, contentName string) (*corev1.SecretReference, error) {
	vars := map[string]string{"volumesnapshotcontent.name": contentName}
	return secretRef(class, "snapshotter-list", paramListSecretName, paramListSecretNamespace, vars, vars)
}

func secretRef(class *snapv1.VolumeSnapshotClass, what, nameKey, nsKey string, nameVars, nsVars map[string]string) (*corev1.SecretReference, error) {
	return templateRef("VolumeSnapshotClass", class.Name, class.Parameters, what, nameKey, nsKey, nameVars, nsVars)
}

func templateRef(kind, className string, params map[string]string, what, nameKey, nsKey string, nameVars, nsVars map[string]string) (*corev1.SecretReference, error) {
	name, hasName := params[nameKey]
	ns, hasNS := params[nsKey]
	switch {
	case !hasName && !hasNS:
		return nil, nil
	case name == "" || ns == "":
		return nil, fmt.Errorf("%s %s must set both %s and %s, not empty", kind, className, nameKey, nsKey)
	}
	ref, err := secrets.Template(what, name, ns, nameVars, nsVars)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, className, err)
	}
	return ref, nil
}

// DeletionSecret is the secret frozen in a content's annotations, or nil.
func DeletionSecret(content *snapv1.VolumeSnapshotContent) *corev1.SecretReference {
	name, ns := content.Annotations[AnnDeletionSecretName], content.Annotations[AnnDeletionSecretNamespace]
	if name == "" || ns == "" {
		return nil
	}
	return &corev1.SecretReference{Name: name, Namespace: ns}
}
