package provisioner_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A claim that CSI cannot carry (8Ei, which the API server stores as the int64 limit; 1e30
// and 9223372036854775808, which Quantity.Value() makes 0 and negative) gets a
// ProvisioningFailed event that names the limit, and the driver is never asked: no
// CreateVolume call, no volume, no PV. Claims of sane sizes still provision meanwhile.
func TestClaimSizesBeyondCSI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	sc := e.class(nil)
	hostile := map[string]string{"exa": "8Ei", "huge": "1e30", "wraps": "9223372036854775808"}
	for name, size := range hostile {
		e.createClaim(claimSpec(name, sc.Name, size, nil))
	}
	for name := range hostile {
		e.waitEvent(name, "ProvisioningFailed", "the largest size a CSI volume can have (9223372036854775807 bytes)")
	}
	pvc := e.createClaim(claimSpec("small", sc.Name, "1Mi", nil))
	_, pv := e.waitBound(pvc.Name, time.Minute)
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Sign() <= 0 || q.Value() < 1<<20 {
		t.Errorf("PV capacity %s for a 1Mi claim", q.String())
	}
	if vols := e.volumes(); len(vols) != 1 || vols[0] != pv.Spec.CSI.VolumeHandle {
		t.Errorf("driver volumes %v, want only %s", vols, pv.Spec.CSI.VolumeHandle)
	}
	// One CreateVolume in all: the small claim's.
	for _, line := range strings.Split(e.metrics(), "\n") {
		if strings.HasPrefix(line, "csi_sidecar_operations_seconds_count{") && strings.Contains(line, "/csi.v1.Controller/CreateVolume") &&
			!(strings.Contains(line, `grpc_status_code="OK"`) && strings.HasSuffix(line, " 1")) {
			t.Errorf("unexpected CreateVolume calls: %s", line)
		}
	}
	pvs, err := e.cs.CoreV1().PersistentVolumes().List(e.ctx, metav1.ListOptions{})
	fatalIf(t, err, "list PVs")
	for _, p := range pvs.Items {
		if p.Spec.CSI != nil && p.Spec.CSI.Driver == e.driver && p.Name != pv.Name {
			t.Errorf("hostile claim got PV %s (capacity %v)", p.Name, p.Spec.Capacity)
		}
	}
	e.deleteClaim(pvc.Name)
	e.waitGone(e.pvGetter(pv.Name), "PV "+pv.Name, time.Minute)
	e.waitVolumes(0, 30*time.Second)
}
