package resizer

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// patchWithVersion gives patches the apiserver's resourceVersion semantics: a patch that
// names a resourceVersion other than the stored one fails with a conflict, and every
// applied patch is stored once, with a new one, under the same lock and counter as updates
// (optimisticConcurrency): a write that interleaves with another is then refused, never
// silently lost, and the informer never sees new content under an old version.
func patchWithVersion(cs *fake.Clientset, mu *sync.Mutex, version *int) {
	cs.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if p.GetPatchType() != types.StrategicMergePatchType {
			return false, nil, nil
		}
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(p.GetPatch(), &body)
		mu.Lock()
		defer mu.Unlock()
		cur, err := cs.Tracker().Get(a.GetResource(), a.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		if rv := body.Metadata.ResourceVersion; rv != "" {
			if cm, _ := meta.Accessor(cur); cm.GetResourceVersion() != rv {
				return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), p.GetName(), errors.New("the object has been modified"))
			}
		}
		raw, err := json.Marshal(cur)
		if err != nil {
			return true, nil, err
		}
		patched, err := strategicpatch.StrategicMergePatch(raw, p.GetPatch(), cur)
		if err != nil {
			return true, nil, err
		}
		obj := reflect.New(reflect.TypeOf(cur).Elem()).Interface().(runtime.Object)
		if err := json.Unmarshal(patched, obj); err != nil {
			return true, nil, err
		}
		*version++
		m, _ := meta.Accessor(obj)
		m.SetResourceVersion(strconv.Itoa(*version))
		return true, obj, cs.Tracker().Update(a.GetResource(), obj, a.GetNamespace())
	})
}

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
