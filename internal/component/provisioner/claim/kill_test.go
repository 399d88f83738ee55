package claim

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
)

// The provisioner is killed at each point of a provision, the claim is deleted while it is
// down, and a new provisioner starts from the journal: every volume left on the backend
// belongs to a PV (whose reclaim deletes it), and no PV is made for the deleted claim. An
// informer-level test on purpose: it kills and restarts the whole controller.
func TestKillAtEachPoint(t *testing.T) {
	for _, point := range []string{
		"while the record is being written",
		"after the record is written, before CreateVolume",
		"during CreateVolume",
		"after CreateVolume, before the PV is saved",
		"after the PV is saved, before the record is dropped",
	} {
		t.Run(point, func(t *testing.T) {
			// A refused write never lands; the provisioner retries it until killed.
			var refusing atomic.Bool
			refuse := func(k8stesting.Action) (bool, runtime.Object, error) {
				if !refusing.Load() {
					return false, nil, nil
				}
				return true, nil, apierrors.NewServiceUnavailable("refused by the test")
			}
			refused := map[string][2]string{
				"while the record is being written":                   {"create", "leases"},
				"after CreateVolume, before the PV is saved":          {"create", "persistentvolumes"},
				"after the PV is saved, before the record is dropped": {"update", "leases"},
			}
			f := newFixturePrepared(t, func(cs *fake.Clientset) {
				if r, ok := refused[point]; ok {
					cs.PrependReactor(r[0], r[1], refuse)
				}
			})
			release := make(chan struct{})
			reached := func() bool { return false }
			switch point {
			case "while the record is being written":
				reached = func() bool { return hasAction(f, "create", "leases") }
			case "after the record is written, before CreateVolume":
				f.drv.Hook("CreateVolume", func(any) error { <-release; return errors.New("killed") })
				reached = func() bool { return f.drv.Calls("CreateVolume") > 0 }
			case "during CreateVolume":
				// The driver creates the volume after the provisioner is gone.
				f.drv.Hook("CreateVolume", func(any) error { <-release; return nil })
				reached = func() bool { return f.drv.Calls("CreateVolume") > 0 }
			case "after CreateVolume, before the PV is saved":
				reached = func() bool { return hasAction(f, "create", "persistentvolumes") }
			case "after the PV is saved, before the record is dropped":
				reached = func() bool { return len(f.pvs()) == 1 }
			}
			refusing.Store(true)
			pvc := f.claim("victim")
			f.waitFor(point, reached)
			f.kill()
			close(release)
			refusing.Store(false)
			f.drv.Hook("CreateVolume", nil)
			if err := f.cs.CoreV1().PersistentVolumeClaims("ns").Delete(f.ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if point == "during CreateVolume" {
				f.waitFor("the volume created after the kill", func() bool { return len(f.drv.Volumes()) == 1 })
			}

			f.start()
			f.waitFor("an empty journal", func() bool { return f.journal.Len() == 0 })
			f.waitFor("every volume owned by a PV", func() bool {
				var handles []string
				for _, pv := range f.pvs() {
					handles = append(handles, pvspec.Handle(&pv))
				}
				for _, v := range f.drv.Volumes() {
					if !slices.Contains(handles, "id-"+v) {
						return false
					}
				}
				return true
			})
			if pvs := f.pvs(); point != "after the PV is saved, before the record is dropped" && len(pvs) > 0 {
				t.Errorf("a PV was made for the deleted claim: %s", pvs[0].Name)
			}
		})
	}
}

func hasAction(f *fixture, verb, resource string) bool {
	for _, a := range f.cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			return true
		}
	}
	return false
}
