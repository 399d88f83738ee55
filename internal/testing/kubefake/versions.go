// Package kubefake gives client-go's fake clientset the resourceVersion semantics of the
// apiserver, which the fake ignores, for unit tests of controllers that rely on them.
package kubefake

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// WithResourceVersions makes cs behave as the apiserver does with resourceVersions: every
// create, update and patch stores a new one; an update, or a patch that names one, fails
// with a conflict unless it carries the stored one. Each write is checked and stored under
// one lock, so a write that interleaves with another is refused, never silently lost, and
// an informer never sees new content under an old version. A controller that writes from
// a stale cache then fails its tests instead of passing them.
func WithResourceVersions(cs *fake.Clientset) {
	v := &versions{cs: cs, next: 100}
	cs.PrependReactor("create", "*", v.create)
	cs.PrependReactor("update", "*", v.update)
	cs.PrependReactor("patch", "*", v.patch)
}

type versions struct {
	cs   *fake.Clientset
	mu   sync.Mutex
	next int
}

func (v *versions) stamp(obj runtime.Object) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	v.next++
	m.SetResourceVersion(strconv.Itoa(v.next))
	return nil
}

func conflict(a clienttesting.Action, name string) error {
	return apierrors.NewConflict(a.GetResource().GroupResource(), name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

func (v *versions) create(a clienttesting.Action) (bool, runtime.Object, error) {
	obj := a.(clienttesting.CreateAction).GetObject()
	v.mu.Lock()
	defer v.mu.Unlock()
	_ = v.stamp(obj)       // an object without metadata is the default reactor's to refuse
	return false, nil, nil // the default reactor stores it, with the version just set
}

func (v *versions) update(a clienttesting.Action) (bool, runtime.Object, error) {
	obj := a.(clienttesting.UpdateAction).GetObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return false, nil, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, err := v.cs.Tracker().Get(a.GetResource(), a.GetNamespace(), m.GetName())
	if err != nil {
		return false, nil, nil // the default reactor answers NotFound
	}
	if cm, _ := meta.Accessor(cur); cm.GetResourceVersion() != m.GetResourceVersion() {
		return true, nil, conflict(a, m.GetName())
	}
	if err := v.stamp(obj); err != nil {
		return true, nil, err
	}
	return true, obj, v.cs.Tracker().Update(a.GetResource(), obj, a.GetNamespace())
}

func (v *versions) patch(a clienttesting.Action) (bool, runtime.Object, error) {
	p := a.(clienttesting.PatchAction)
	var body struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(p.GetPatch(), &body)
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, err := v.cs.Tracker().Get(a.GetResource(), a.GetNamespace(), p.GetName())
	if err != nil {
		return true, nil, err
	}
	if rv := body.Metadata.ResourceVersion; rv != "" {
		if cm, _ := meta.Accessor(cur); cm.GetResourceVersion() != rv {
			return true, nil, conflict(a, p.GetName())
		}
	}
	raw, err := json.Marshal(cur)
	if err != nil {
		return true, nil, err
	}
	var patched []byte
	switch p.GetPatchType() {
	case types.StrategicMergePatchType:
		patched, err = strategicpatch.StrategicMergePatch(raw, p.GetPatch(), cur)
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(raw, p.GetPatch())
	default:
		return false, nil, nil
	}
	if err != nil {
		return true, nil, err
	}
	obj := reflect.New(reflect.TypeOf(cur).Elem()).Interface().(runtime.Object)
	if err := json.Unmarshal(patched, obj); err != nil {
		return true, nil, err
	}
	if err := v.stamp(obj); err != nil {
		return true, nil, err
	}
	return true, obj, v.cs.Tracker().Update(a.GetResource(), obj, a.GetNamespace())
}
