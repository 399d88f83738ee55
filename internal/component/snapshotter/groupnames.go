package snapshotter

import (
	"crypto/sha256"
	"fmt"
	"strings"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/internal/component/provisioner/secrets"
)

// Annotations and finalizers of external-snapshotter's group snapshots.
const (
	// FinalizerGroupContentBound keeps a bound VolumeGroupSnapshotContent until the sidecar
	// has dealt with the backend group snapshot.
	FinalizerGroupContentBound = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshotcontent-bound-protection"
	// FinalizerGroupBound keeps a bound VolumeGroupSnapshot of a Delete-policy content until
	// the content (and so the backend group snapshot) is gone.
	FinalizerGroupBound = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-bound-protection"
	// FinalizerSnapshotInGroup is on every member VolumeSnapshot of a group: it goes once the
	// group is gone.
	FinalizerSnapshotInGroup = "snapshot.storage.kubernetes.io/volumesnapshot-in-group-protection"

	// AnnGroupDefaultClass marks the default VolumeGroupSnapshotClass of a driver ("true" only).
	AnnGroupDefaultClass = "groupsnapshot.storage.kubernetes.io/is-default-class"
	// AnnGroupBeingCreated and AnnGroupBeingDeleted are the group equivalents of
	// AnnBeingCreated and AnnBeingDeleted, on a VolumeGroupSnapshotContent.
	AnnGroupBeingCreated = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-created"
	AnnGroupBeingDeleted = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-deleted"
	// AnnGroupDeletionSecretName and -Namespace freeze the group snapshotter secret of a
	// group content for CreateVolumeGroupSnapshot and DeleteVolumeGroupSnapshot.
	AnnGroupDeletionSecretName      = "groupsnapshot.storage.kubernetes.io/deletion-secret-name"
	AnnGroupDeletionSecretNamespace = "groupsnapshot.storage.kubernetes.io/deletion-secret-namespace"

	// GroupContentPrefix names dynamic group contents: groupsnapcontent-<VolumeGroupSnapshot UID>.
	GroupContentPrefix = "groupsnapcontent-"
)

// Class parameter keys of the group snapshotter secrets.
const (
	paramGroupSecretName         = secrets.Prefix + "group-snapshotter-secret-name"
	paramGroupSecretNamespace    = secrets.Prefix + "group-snapshotter-secret-namespace"
	paramGroupGetSecretName      = secrets.Prefix + "group-snapshotter-get-secret-name"
	paramGroupGetSecretNamespace = secrets.Prefix + "group-snapshotter-get-secret-namespace"
)

// GroupContentName is the name of the dynamic content of a VolumeGroupSnapshot.
func GroupContentName(vgs *groupv1.VolumeGroupSnapshot) string {
	return GroupContentPrefix + string(vgs.UID)
}

// MemberSnapshotName and MemberContentName name the VolumeSnapshot and VolumeSnapshotContent
// of the member of a group (by its UID) that snapshots volumeHandle, as upstream does: a
// hash of both, so a retry after a crash finds the same objects.
func MemberSnapshotName(groupUID, volumeHandle string) string {
	return fmt.Sprintf("snapshot-%x", sha256.Sum256([]byte(groupUID+volumeHandle)))
}

// MemberContentName: see MemberSnapshotName.
func MemberContentName(groupUID, volumeHandle string) string {
	return fmt.Sprintf("snapcontent-%x", sha256.Sum256([]byte(groupUID+volumeHandle)))
}

// GroupOwner returns the name of the VolumeGroupSnapshot that owns vs, or "".
func GroupOwner(vs metav1.Object) string {
	if o := GroupOwnerRef(vs); o != nil {
		return o.Name
	}
	return ""
}

// GroupOwnerRef is the owner reference of a member to its VolumeGroupSnapshot, or nil.
func GroupOwnerRef(vs metav1.Object) *metav1.OwnerReference {
	for _, o := range vs.GetOwnerReferences() {
		if o.Kind == "VolumeGroupSnapshot" && strings.HasPrefix(o.APIVersion, groupv1.GroupName+"/") {
			return &o
		}
	}
	return nil
}

// GroupParameters returns the group class parameters for CreateVolumeGroupSnapshot, as
// Parameters does for a snapshot class.
func GroupParameters(class *groupv1.VolumeGroupSnapshotClass) (map[string]string, error) {
	return classParameters("VolumeGroupSnapshotClass", class.Name, class.Parameters)
}

// GroupSecret resolves the group snapshotter secret of a new group content, with
// ${volumegroupsnapshotcontent.name}, ${volumegroupsnapshot.name} and
// ${volumegroupsnapshot.namespace} in the name and the content name and the group's
// namespace in the namespace. vgs may be nil (a member content): only the content name is
// known then. nil means the class names no secret.
func GroupSecret(class *groupv1.VolumeGroupSnapshotClass, contentName string, vgs *groupv1.VolumeGroupSnapshot) (*corev1.SecretReference, error) {
	nameVars := map[string]string{"volumegroupsnapshotcontent.name": contentName}
	nsVars := map[string]string{"volumegroupsnapshotcontent.name": contentName}
	if vgs != nil {
		nameVars["volumegroupsnapshot.name"], nameVars["volumegroupsnapshot.namespace"] = vgs.Name, vgs.Namespace
		nsVars["volumegroupsnapshot.namespace"] = vgs.Namespace
	}
	return templateRef("VolumeGroupSnapshotClass", class.Name, class.Parameters, "group-snapshotter", paramGroupSecretName, paramGroupSecretNamespace, nameVars, nsVars)
}

// GroupGetSecret resolves the secret for GetVolumeGroupSnapshot of a pre-provisioned group.
func GroupGetSecret(class *groupv1.VolumeGroupSnapshotClass, contentName string) (*corev1.SecretReference, error) {
	vars := map[string]string{"volumegroupsnapshotcontent.name": contentName}
	return templateRef("VolumeGroupSnapshotClass", class.Name, class.Parameters, "group-snapshotter-get", paramGroupGetSecretName, paramGroupGetSecretNamespace, vars, vars)
}

// GroupDeletionSecret is the secret frozen in a group content's annotations, or nil.
func GroupDeletionSecret(content *groupv1.VolumeGroupSnapshotContent) *corev1.SecretReference {
	name, ns := content.Annotations[AnnGroupDeletionSecretName], content.Annotations[AnnGroupDeletionSecretNamespace]
	if name == "" || ns == "" {
		return nil
	}
	return &corev1.SecretReference{Name: name, Namespace: ns}
}

// MemberOf reports whether owner references refs make an object a member of the group with
// uid: the group controller owns each member VolumeSnapshot it creates.
func MemberOf(refs []metav1.OwnerReference, group types.UID) bool {
	for _, o := range refs {
		if o.UID == group && o.Kind == "VolumeGroupSnapshot" {
			return true
		}
	}
	return false
}
