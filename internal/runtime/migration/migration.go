// Package migration is CSI migration for every kubevol component: the in-tree volume
// plugins that Kubernetes 1.37 hands to CSI drivers (kubernetes.io/aws-ebs to
// ebs.csi.aws.com, kubernetes.io/gce-pd to pd.csi.storage.gke.io, and azure-disk,
// azure-file, cinder, vsphere-volume and portworx likewise) and the translation of their
// StorageClasses, PersistentVolumes and inline pod volumes to and from CSI.
//
// Every translation is k8s.io/csi-translation-lib's, at the control plane's version, as
// external-provisioner, external-attacher, external-resizer and the kubelet call it: this
// package only decides when to call it, so that kubevol and the upstream components agree
// on every translated field (volume handles, topology keys, attachment and staging names).
package migration

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	csitranslation "k8s.io/csi-translation-lib"
	"k8s.io/csi-translation-lib/plugins"
	"k8s.io/klog/v2"
)

var translator = csitranslation.New()

// MigratedPluginsAnnotation is the CSINode annotation that lists the in-tree plugins whose
// volumes the node mounts through CSI (the kubelet's nodeinfomanager writes it; the
// scheduler's volume binding reads it).
const MigratedPluginsAnnotation = corev1.MigratedPluginsAnnotationKey

// AnnMigratedTo is the annotation kube-controller-manager's PV controller sets on the
// claims and PVs of a migrated plugin: the CSI driver that now serves them.
const AnnMigratedTo = "pv.kubernetes.io/migrated-to"

// inTreePlugins are the plugins the kubelet of 1.37 reports as migrated, all of them
// always (csiPlugin.Init's migratedPlugins), and for which kube-controller-manager treats
// migration as complete (csimigration.PluginManager.IsMigrationCompleteForPlugin).
var inTreePlugins = []string{
	plugins.AWSEBSInTreePluginName,
	plugins.AzureDiskInTreePluginName,
	plugins.AzureFileInTreePluginName,
	plugins.CinderInTreePluginName,
	plugins.GCEPDInTreePluginName,
	plugins.PortworxVolumePluginName,
	plugins.VSphereInTreePluginName,
}

// MigratedPlugins is the value of MigratedPluginsAnnotation as the kubelet writes it: every
// migrated in-tree plugin, sorted, comma-separated, whatever drivers are registered.
func MigratedPlugins() string {
	s := slices.Clone(inTreePlugins)
	slices.Sort(s)
	return strings.Join(s, ",")
}

// InTreeName is the in-tree plugin migrated to the CSI driver, "" when none is.
func InTreeName(driver string) string {
	name, err := translator.GetInTreeNameFromCSIName(driver)
	if err != nil {
		return ""
	}
	return name
}

// CSIName is the CSI driver an in-tree plugin is migrated to, "" when it is not migrated.
func CSIName(inTree string) string {
	if !slices.Contains(inTreePlugins, inTree) {
		return ""
	}
	name, err := translator.GetCSINameFromInTreeName(inTree)
	if err != nil {
		return ""
	}
	return name
}

// IsInTreePV reports whether pv is an in-tree volume of a migrated plugin.
func IsInTreePV(pv *corev1.PersistentVolume) bool {
	return pv != nil && pv.Spec.CSI == nil && translator.IsPVMigratable(pv)
}

// IsInTreeVolume reports whether an inline pod volume is one of a migrated plugin.
func IsInTreeVolume(v *corev1.Volume) bool {
	return v != nil && v.CSI == nil && translator.IsInlineMigratable(v)
}

// PVToCSI returns pv as a CSI PV: pv itself when it already is one, its translation when it
// is an in-tree volume of a migrated plugin (upstream's TranslateInTreePVToCSI, which copies
// it), else an error. pv is not modified.
func PVToCSI(logger klog.Logger, pv *corev1.PersistentVolume) (*corev1.PersistentVolume, error) {
	switch {
	case pv == nil:
		return nil, fmt.Errorf("no PersistentVolume")
	case pv.Spec.CSI != nil:
		return pv, nil
	case !translator.IsPVMigratable(pv):
		return nil, fmt.Errorf("PersistentVolume %s is neither a CSI volume nor an in-tree volume of a plugin migrated to CSI", pv.Name)
	}
	out, err := translator.TranslateInTreePVToCSI(logger, pv)
	if err != nil {
		return nil, fmt.Errorf("translate in-tree PersistentVolume %s to CSI: %w", pv.Name, err)
	}
	return out, nil
}

// CSISource is the CSI source of pv, translated when pv is an in-tree volume of a migrated
// plugin; nil when it is neither (or the translation fails).
func CSISource(pv *corev1.PersistentVolume) *corev1.CSIPersistentVolumeSource {
	if pv == nil {
		return nil
	}
	if pv.Spec.CSI != nil {
		return pv.Spec.CSI
	}
	if !translator.IsPVMigratable(pv) {
		return nil
	}
	out, err := translator.TranslateInTreePVToCSI(klog.Background(), pv)
	if err != nil {
		return nil
	}
	return out.Spec.CSI
}

// SpecToCSI is the CSI form of a VolumeAttachment's spec.source.inlineVolumeSpec: the
// attach/detach controller fills it with the spec the translation made of a pod's inline
// in-tree volume, and an older one may leave it in-tree, which is translated here as
// external-attacher does.
func SpecToCSI(logger klog.Logger, spec *corev1.PersistentVolumeSpec) (*corev1.PersistentVolumeSpec, error) {
	if spec.CSI != nil {
		return spec, nil
	}
	pv, err := PVToCSI(logger, &corev1.PersistentVolume{Spec: *spec})
	if err != nil {
		return nil, err
	}
	return &pv.Spec, nil
}

// VolumeToCSI translates an inline in-tree volume of a pod in namespace ns into the CSI PV
// the kubelet mounts in its place (named <driver>-<handle>, the name of its pod directory).
func VolumeToCSI(logger klog.Logger, v *corev1.Volume, ns string) (*corev1.PersistentVolume, error) {
	pv, err := translator.TranslateInTreeInlineVolumeToCSI(logger, v, ns)
	if err != nil {
		return nil, fmt.Errorf("translate in-tree volume %q to CSI: %w", v.Name, err)
	}
	return pv, nil
}

// ClassToCSI translates a StorageClass of an in-tree provisioner into the class its CSI
// driver provisions from: parameters, fsType and topology (upstream's
// TranslateInTreeStorageClassToCSI). class is not modified.
func ClassToCSI(logger klog.Logger, class *storagev1.StorageClass) (*storagev1.StorageClass, error) {
	out, err := translator.TranslateInTreeStorageClassToCSI(logger, class.Provisioner, class)
	if err != nil {
		return nil, fmt.Errorf("translate StorageClass %q of in-tree provisioner %s to CSI: %w", class.Name, class.Provisioner, err)
	}
	return out, nil
}

// PVToInTree translates a CSI PV of a migration target back to its in-tree form, as
// external-provisioner writes the PVs of migrated claims. pv is not modified.
func PVToInTree(pv *corev1.PersistentVolume) (*corev1.PersistentVolume, error) {
	out, err := translator.TranslateCSIPVToInTree(pv)
	if err != nil {
		return nil, fmt.Errorf("translate PersistentVolume %s to its in-tree form: %w", pv.Name, err)
	}
	return out, nil
}

// Handle is the CSI volume handle of pv, translated from its in-tree source for a volume of
// a migrated plugin; "" for any other PV.
func Handle(pv *corev1.PersistentVolume) string {
	if src := CSISource(pv); src != nil {
		return src.VolumeHandle
	}
	return ""
}
