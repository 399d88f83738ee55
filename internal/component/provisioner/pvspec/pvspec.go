// Package pvspec names and shapes the PersistentVolumes the provisioner creates, exactly as
// external-provisioner shapes them, so that the attacher, the kubelet, the resizer and the
// PV controller see no difference. It also holds the annotation and finalizer keys of that
// contract.
package pvspec

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/internal/runtime/migration"
)

// Annotations, labels and finalizers of the provisioning contract.
const (
	AnnStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	AnnBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	AnnMigratedTo             = "pv.kubernetes.io/migrated-to"
	AnnSelectedNode           = "volume.kubernetes.io/selected-node"
	AnnBetaStorageClass       = "volume.beta.kubernetes.io/storage-class"
	AnnProvisionedBy          = "pv.kubernetes.io/provisioned-by"

	AnnDeletionSecretName      = "volume.kubernetes.io/provisioner-deletion-secret-name"
	AnnDeletionSecretNamespace = "volume.kubernetes.io/provisioner-deletion-secret-namespace"
	AnnModifySecretName        = "volume.kubernetes.io/controller-modify-secret-name"
	AnnModifySecretNamespace   = "volume.kubernetes.io/controller-modify-secret-namespace"

	// Finalizer keeps a PV with reclaim policy Delete until its backing volume is deleted.
	Finalizer = "external-provisioner.volume.kubernetes.io/finalizer"
	// CloneFinalizer keeps the source PVC of a clone until the clone is provisioned.
	CloneFinalizer = "provisioner.storage.kubernetes.io/cloning-protection"
	// IdentityAttribute names the provisioner instance in volumeAttributes (informational).
	IdentityAttribute = "storage.kubernetes.io/csiProvisionerIdentity"
)

// VolumeName is the PV name and the CreateVolume name: <prefix>-<uid>, or with uuidLength
// > 0, the UID without dashes cut to that length (upstream --volume-name-uuid-length).
func VolumeName(prefix string, uid types.UID, uuidLength int) string {
	id := string(uid)
	if uuidLength > 0 {
		id = strings.ReplaceAll(id, "-", "")
		if uuidLength < len(id) {
			id = id[:uuidLength]
		}
	}
	return prefix + "-" + id
}

// ClaimClass is the claim's StorageClass name, the beta annotation first, as the PV
// controller reads it.
func ClaimClass(c *corev1.PersistentVolumeClaim) string {
	if v, ok := c.Annotations[AnnBetaStorageClass]; ok {
		return v
	}
	if c.Spec.StorageClassName != nil {
		return *c.Spec.StorageClassName
	}
	return ""
}

// VolumeCapabilities builds one CSI capability per access mode of the claim, block or mount.
func VolumeCapabilities(c *corev1.PersistentVolumeClaim, fsType string, mountOptions []string, singleNodeMultiWriter bool) ([]*csi.VolumeCapability, error) {
	if len(c.Spec.AccessModes) == 0 {
		return nil, fmt.Errorf("claim has no access modes")
	}
	var caps []*csi.VolumeCapability
	for _, m := range c.Spec.AccessModes {
		mode, err := accessmodes.ToCSIAccessMode([]corev1.PersistentVolumeAccessMode{m}, singleNodeMultiWriter)
		if err != nil {
			return nil, fmt.Errorf("access mode %s: %w", m, err)
		}
		vc := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
		if IsBlock(c) {
			vc.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		} else {
			vc.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: mountOptions}}
		}
		caps = append(caps, vc)
	}
	return caps, nil
}

// IsBlock reports whether the claim asks for a raw block volume.
func IsBlock(c *corev1.PersistentVolumeClaim) bool {
	return c.Spec.VolumeMode != nil && *c.Spec.VolumeMode == corev1.PersistentVolumeBlock
}

// Secrets are the references the PV carries.
type Secrets struct {
	Provisioner, ControllerPublish, NodeStage, NodePublish, ControllerExpand, NodeExpand, ControllerModify *corev1.SecretReference
}

// Input is everything a PV is built from.
type Input struct {
	Name, Driver, Identity string
	Claim                  *corev1.PersistentVolumeClaim
	Class                  *storagev1.StorageClass
	Volume                 *csi.Volume
	RequestedBytes         int64
	FSType                 string
	Secrets                Secrets
	// Topology is whether the driver supports accessibility constraints.
	Topology bool
	// ControllerPublishReadOnly is --controller-publish-readonly.
	ControllerPublishReadOnly bool
}

// Build returns the PV for a created volume.
func Build(in Input) *corev1.PersistentVolume {
	c := in.Claim
	size := in.Volume.GetCapacityBytes()
	if size <= 0 {
		// A driver may leave it unset; a negative one (an overflow) is never recorded, and
		// the caller has refused a volume smaller than the request anyway.
		size = in.RequestedBytes
	}
	attrs := make(map[string]string, len(in.Volume.GetVolumeContext())+1)
	for k, v := range in.Volume.GetVolumeContext() {
		attrs[k] = v
	}
	attrs[IdentityAttribute] = in.Identity
	src := &corev1.CSIPersistentVolumeSource{
		Driver:                     in.Driver,
		VolumeHandle:               in.Volume.GetVolumeId(),
		VolumeAttributes:           attrs,
		ControllerPublishSecretRef: in.Secrets.ControllerPublish,
		NodeStageSecretRef:         in.Secrets.NodeStage,
		NodePublishSecretRef:       in.Secrets.NodePublish,
		ControllerExpandSecretRef:  in.Secrets.ControllerExpand,
		NodeExpandSecretRef:        in.Secrets.NodeExpand,
	}
	if !IsBlock(c) {
		src.FSType = in.FSType
	}
	if in.ControllerPublishReadOnly && len(c.Spec.AccessModes) == 1 && c.Spec.AccessModes[0] == corev1.ReadOnlyMany {
		src.ReadOnly = true
	}
	ann := map[string]string{
		AnnProvisionedBy:           in.Class.Provisioner,
		AnnDeletionSecretName:      "",
		AnnDeletionSecretNamespace: "",
	}
	if s := in.Secrets.Provisioner; s != nil {
		ann[AnnDeletionSecretName], ann[AnnDeletionSecretNamespace] = s.Name, s.Namespace
	}
	if s := in.Secrets.ControllerModify; s != nil {
		ann[AnnModifySecretName], ann[AnnModifySecretNamespace] = s.Name, s.Namespace
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: in.Name, Annotations: ann, Finalizers: []string{Finalizer}},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:                   c.Spec.AccessModes,
			MountOptions:                  in.Class.MountOptions,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: src},
			ClaimRef:                      ClaimRef(c),
			StorageClassName:              ClaimClass(c),
			VolumeMode:                    c.Spec.VolumeMode,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			VolumeAttributesClassName:     c.Spec.VolumeAttributesClassName,
		},
	}
	if in.Class.ReclaimPolicy != nil {
		pv.Spec.PersistentVolumeReclaimPolicy = *in.Class.ReclaimPolicy
	}
	if in.Topology {
		pv.Spec.NodeAffinity = NodeAffinity(in.Volume.GetAccessibleTopology())
	}
	return pv
}

// ClaimRef is the full reference the PV controller expects of a pre-bound PV.
func ClaimRef(c *corev1.PersistentVolumeClaim) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		Kind: "PersistentVolumeClaim", APIVersion: "v1",
		Namespace: c.Namespace, Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion,
	}
}

// NodeAffinity is one node selector term per accessible topology, each segment an `In`
// with a single value; nil when the volume has no topology.
func NodeAffinity(topologies []*csi.Topology) *corev1.VolumeNodeAffinity {
	var terms []corev1.NodeSelectorTerm
	for _, t := range topologies {
		if len(t.GetSegments()) == 0 {
			continue
		}
		var term corev1.NodeSelectorTerm
		for _, k := range slices.Sorted(maps.Keys(t.GetSegments())) {
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{
				Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{t.GetSegments()[k]}})
		}
		terms = append(terms, term)
	}
	if len(terms) == 0 {
		return nil
	}
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}
}

// ProvisionedBy reports whether this driver provisioned the PV (upstream
// isProvisionerForVolume: the annotation, else the CSI driver of a static PV, else migrated-to).
//
// A PV of a migrated claim names the in-tree plugin (kubernetes.io/aws-ebs), as
// external-provisioner writes it, and kube-controller-manager adds migrated-to with the
// driver: either makes it the driver's, as the library's additional provisioner names do.
func ProvisionedBy(pv *corev1.PersistentVolume, driver string) bool {
	if v, ok := pv.Annotations[AnnProvisionedBy]; ok {
		return v == driver || (v != "" && v == migration.InTreeName(driver)) || pv.Annotations[AnnMigratedTo] == driver
	}
	if pv.Spec.CSI != nil {
		return pv.Spec.CSI.Driver == driver
	}
	return pv.Annotations[AnnMigratedTo] == driver
}

// SameVolume explains why an existing PV is not the one this provisioner would have made
// for the claim and the volume handle; nil means it is ours. Upstream accepts any existing
// PV of the right name (library issue #55), which can leak the new volume.
func SameVolume(existing *corev1.PersistentVolume, driver string, claim *corev1.PersistentVolumeClaim, handle string) error {
	switch {
	case !ProvisionedBy(existing, driver):
		return fmt.Errorf("PersistentVolume %s already exists and was not provisioned by %s", existing.Name, driver)
	case Handle(existing) != handle:
		return fmt.Errorf("PersistentVolume %s already exists for a different volume", existing.Name)
	case existing.Spec.ClaimRef == nil || existing.Spec.ClaimRef.UID != claim.UID:
		return fmt.Errorf("PersistentVolume %s already exists for a different claim", existing.Name)
	case existing.DeletionTimestamp != nil:
		return fmt.Errorf("PersistentVolume %s already exists and is being deleted", existing.Name)
	}
	return nil
}

// HasFinalizer reports whether obj carries the finalizer f (the contract's Finalizer on a
// PV, CloneFinalizer on a clone source claim).
func HasFinalizer(obj metav1.Object, f string) bool {
	return slices.Contains(obj.GetFinalizers(), f)
}

// Handle is the CSI volume handle of pv, translated from its in-tree source for a volume of
// a migrated plugin; "" for any other PV.
func Handle(pv *corev1.PersistentVolume) string { return migration.Handle(pv) }
