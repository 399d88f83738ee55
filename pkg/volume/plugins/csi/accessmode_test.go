package csi

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
)

// Upstream's access-mode mapping, with and without the node's SINGLE_NODE_MULTI_WRITER: a
// driver with it that got SINGLE_NODE_WRITER for RWO may refuse a second pod of the node.
func TestCapabilityAccessModeMapping(t *testing.T) {
	multi := map[csipb.NodeServiceCapability_RPC_Type]bool{csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER: true}
	for _, c := range []struct {
		mode        v1.PersistentVolumeAccessMode
		without, wi csipb.VolumeCapability_AccessMode_Mode
	}{
		{v1.ReadWriteOnce, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
		{v1.ReadWriteOncePod, csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
		{v1.ReadWriteMany, csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		{v1.ReadOnlyMany, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
	} {
		s := source{accessModes: []v1.PersistentVolumeAccessMode{c.mode}}
		if got := s.capability("", "", nil).GetAccessMode().GetMode(); got != c.without {
			t.Errorf("%s without SINGLE_NODE_MULTI_WRITER: %s, want %s", c.mode, got, c.without)
		}
		if got := s.capability("", "", multi).GetAccessMode().GetMode(); got != c.wi {
			t.Errorf("%s with SINGLE_NODE_MULTI_WRITER: %s, want %s", c.mode, got, c.wi)
		}
	}
}
