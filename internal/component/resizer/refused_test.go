package resizer

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// A claim write the API server refuses (a role without patch on persistentvolumeclaims/
// status) is a Warning event on the claim that names the write, retried with backoff, and
// never a silent retry at level 2.
func TestRefusedWriteWarns(t *testing.T) {
	pvc, pv := volume("data", driverName, "1Gi", "1Gi", nil)
	e := newSyncEnv(t, &modifyDriver{fakeDriver: newFakeDriver()}, Config{HandleVolumeInUseError: true}, pvc, pv)
	e.cs.PrependReactor("patch", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims/status"}, "data", errors.New("RBAC: patch not allowed"))
	})
	e.setRequest("data", "2Gi")
	for try := 1; try <= 2; try++ {
		if err := e.expand("data"); err == nil {
			t.Fatalf("sync %d with the claim's status unwritable succeeded: it would not be retried", try)
		}
		e.sawEvent(controller.ReasonWriteFailed, "cannot patch persistentvolumeclaims/status")
		e.sawEvent(controller.ReasonWriteFailed, "forbidden")
		e.seen = nil
	}
	if s := e.pvSize("pv-data"); s != gi(1) {
		t.Errorf("PV capacity = %d with the claim's status unwritable, want it unchanged", s)
	}
}
