package csi

import "testing"

// TestOtherAgentsMount: another node agent's staging and pod mounts of a CSI volume (the
// kubelet's layout outside this root) are not this node's references; this node's own, and
// any other mount, still are.
func TestOtherAgentsMount(t *testing.T) {
	root := "/up/nodes/n-2/node"
	for ref, other := range map[string]bool{
		"/up/node/plugins/kubernetes.io/csi/d.example.com/abc/globalmount":           true,
		"/up/node/pods/uid/volumes/kubernetes.io~csi/pvc-1/mount":                    true,
		"/up/nodes/n-2/node/plugins/kubernetes.io/csi/d.example.com/abc/globalmount": false,
		"/up/nodes/n-2/node/pods/uid/volumes/kubernetes.io~csi/pvc-1/mount":          false,
		"/var/lib/driver/mnt/pvc-1":                                                  false,
		"/up/node/pods/uid/volumes/kubernetes.io~empty-dir/x/mount":                  false,
	} {
		if got := otherAgentsMount(root, ref); got != other {
			t.Errorf("otherAgentsMount(%s) = %v, want %v", ref, got, other)
		}
	}
}
