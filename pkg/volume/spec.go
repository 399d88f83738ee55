package volume

import (
	"reflect"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Spec is one volume as a plugin sees it: an inline pod volume or a persistent volume.
type Spec struct {
	Volume           *v1.Volume
	PersistentVolume *v1.PersistentVolume
	// ReadOnly is the pod's or the claim's readOnly flag.
	ReadOnly bool
	// Migrated: PersistentVolume is the CSI translation of an in-tree volume of a plugin
	// migrated to CSI (an in-tree PV, or an inline in-tree volume of a pod), as the kubelet's
	// volume.Spec.Migrated; the operation metrics say so in their migrated label.
	Migrated bool
}

// SpecFromVolume wraps an inline pod volume.
func SpecFromVolume(v *v1.Volume) *Spec { return &Spec{Volume: v} }

// SpecFromPersistentVolume wraps a bound PV.
func SpecFromPersistentVolume(pv *v1.PersistentVolume, readOnly bool) *Spec {
	return &Spec{PersistentVolume: pv, ReadOnly: readOnly}
}

// Block reports whether the volume is a raw block device (a PV with volumeMode: Block),
// which pods use through volumeDevices instead of volumeMounts.
func (s *Spec) Block() bool {
	return s != nil && s.PersistentVolume != nil && s.PersistentVolume.Spec.VolumeMode != nil &&
		*s.PersistentVolume.Spec.VolumeMode == v1.PersistentVolumeBlock
}

// Name is the inner volume spec name: the PV name for a claim, the pod volume name
// otherwise. It is the directory name under pods/<uid>/volumes/<plugin>/.
func (s *Spec) Name() string {
	switch {
	case s == nil:
		return ""
	case s.Volume != nil:
		return s.Volume.Name
	case s.PersistentVolume != nil:
		return s.PersistentVolume.Name
	}
	return ""
}

// sourceType is the volume's type as the API names it (nfs, iscsi, csi, configMap, ...):
// the JSON name of the source that is set, "" if none is.
func (s *Spec) sourceType() string {
	var src reflect.Value
	switch {
	case s == nil:
		return ""
	case s.Volume != nil:
		src = reflect.ValueOf(s.Volume.VolumeSource)
	case s.PersistentVolume != nil:
		src = reflect.ValueOf(s.PersistentVolume.Spec.PersistentVolumeSource)
	default:
		return ""
	}
	for i := 0; i < src.NumField(); i++ {
		if f := src.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(src.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return ""
}
