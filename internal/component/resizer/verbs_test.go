package resizer

import (
	"testing"
)

// external-resizer's role grants patch on PVs and on persistentvolumeclaims/status, and no
// other write on either: an expansion uses nothing else.
func TestExpansionOnlyPatches(t *testing.T) {
	pvc, pv := volume("verbs", driverName, "1Gi", "2Gi", nil)
	e := newSyncEnv(t, &modifyDriver{fakeDriver: newFakeDriver()}, Config{HandleVolumeInUseError: true}, pvc, pv)
	if err := e.expand("verbs"); err != nil {
		t.Fatal(err)
	}
	// Resizing, the PV's new size, the claim's new capacity, then the finished status.
	e.f.ExpectActions("patch persistentvolumeclaims/status", "patch persistentvolumes",
		"patch persistentvolumeclaims/status", "patch persistentvolumeclaims/status")
	if c := e.claim("verbs"); storageQ(c.Status.Capacity) != gi(2) {
		t.Fatalf("claim not expanded: %+v", c.Status)
	}
}
