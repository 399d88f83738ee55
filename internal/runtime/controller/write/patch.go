package write

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// twoWayPatch returns the strategic merge patch that turns old into cur, two objects of the
// same built-in kind, and whether there is anything to write. The upstream sidecars whose
// roles grant only patch (the attacher and the resizer) write this way: a finalizer is
// added or removed by a list directive, so a concurrent writer of another finalizer is not
// undone, and no resourceVersion is needed.
func twoWayPatch(old, cur runtime.Object) ([]byte, bool, error) {
	a, err := json.Marshal(old)
	if err != nil {
		return nil, false, err
	}
	b, err := json.Marshal(cur)
	if err != nil {
		return nil, false, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(a, b, old)
	if err != nil {
		return nil, false, fmt.Errorf("patch of %T: %w", old, err)
	}
	return patch, string(patch) != "{}", nil
}

// versionedPatch is twoWayPatch with old's resourceVersion in the patch: the API server
// refuses it with a conflict when the object changed since old was read, as an update
// would be refused. external-resizer patches claims and PVs this way.
func versionedPatch(old, cur runtime.Object) ([]byte, bool, error) {
	patch, changed, err := twoWayPatch(old, cur)
	if err != nil || !changed {
		return patch, changed, err
	}
	m, err := meta.Accessor(old)
	if err != nil {
		return nil, false, err
	}
	var obj map[string]any
	if err := json.Unmarshal(patch, &obj); err != nil {
		return nil, false, err
	}
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	md["resourceVersion"] = m.GetResourceVersion()
	obj["metadata"] = md
	patch, err = json.Marshal(obj)
	return patch, true, err
}
