package resizer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// external-resizer's role grants patch on PVs and on persistentvolumeclaims/status, and no
// other write on either: an expansion uses nothing else.
func TestExpansionOnlyPatches(t *testing.T) {
	pvc, pv := volume("verbs", driverName, "1Gi", "2Gi", nil)
	e := start(t, newFakeDriver(), pvc, pv)
	e.waitClaim("verbs", "expanded", func(c *corev1.PersistentVolumeClaim) bool { return storageQ(c.Status.Capacity) == gi(2) })
	var pvPatched, statusPatched bool
	for _, a := range e.cs.Actions() {
		r, sub := a.GetResource().Resource, a.GetSubresource()
		switch {
		case a.GetVerb() == "patch" && r == "persistentvolumes" && sub == "":
			pvPatched = true
		case a.GetVerb() == "patch" && r == "persistentvolumeclaims" && sub == "status":
			statusPatched = true
		case (r == "persistentvolumes" || r == "persistentvolumeclaims") && a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch":
			t.Errorf("%s %s/%s: upstream's role does not grant it", a.GetVerb(), r, sub)
		}
	}
	if !pvPatched || !statusPatched {
		t.Errorf("PV patched %v, claim status patched %v: want both", pvPatched, statusPatched)
	}
}
