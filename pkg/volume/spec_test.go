package volume

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// A volume no plugin serves is refused with its type named, so the pod's FailedMount says
// what is missing.
func TestUnsupportedVolumeNamesItsType(t *testing.T) {
	pm := NewPluginManager(HostConfig{})
	for _, tc := range []struct {
		spec *Spec
		want string
	}{
		{SpecFromVolume(&v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}}), "nfs"},
		{SpecFromPersistentVolume(&v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{
			ISCSI: &v1.ISCSIPersistentVolumeSource{}}}}, false), "iscsi"},
		{SpecFromVolume(&v1.Volume{Name: "f", VolumeSource: v1.VolumeSource{FlexVolume: &v1.FlexVolumeSource{Driver: "d"}}}), "flexVolume"},
	} {
		_, err := pm.FindBySpec(tc.spec)
		if err == nil || !strings.HasSuffix(err.Error(), "of type "+tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.spec.Name(), err, tc.want)
		}
	}
}
