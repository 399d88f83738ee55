// Package conversion is kubevol's snapshot-conversion-webhook (external-snapshotter's
// cmd/snapshot-conversion-webhook): the CustomResourceDefinition conversion webhook that lets
// the API server serve the groupsnapshot.storage.k8s.io objects in v1, v1beta1 and v1beta2
// while it stores one of them (v1beta2 during upstream's migration).
//
// Only VolumeGroupSnapshotContent differs between the versions: v1beta1's status lists
// volumeSnapshotHandlePairList (volumeHandle, snapshotHandle), v1beta2 and v1 list
// volumeSnapshotInfoList, whose entries also carry creationTime, readyToUse and restoreSize.
// v1 and v1beta2 have the same schema. As upstream, an object taken down to v1beta1 keeps the
// full list in the annotation InfoListAnnotation, so that it comes back up without loss.
package conversion

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Group is the API group whose objects are converted.
const Group = "groupsnapshot.storage.k8s.io"

// The served versions, as apiVersion values.
const (
	V1      = Group + "/v1"
	V1beta1 = Group + "/v1beta1"
	V1beta2 = Group + "/v1beta2"
)

// InfoListAnnotation holds a VolumeGroupSnapshotContent's status.volumeSnapshotInfoList while
// the object is read or written as v1beta1, which has no room for the entries' creationTime,
// readyToUse and restoreSize. Upstream's name.
const InfoListAnnotation = "groupsnapshot.storage.kubernetes.io/volume-snapshot-info-list"

// The status lists of a VolumeGroupSnapshotContent.
const (
	pairList = "volumeSnapshotHandlePairList" // v1beta1
	infoList = "volumeSnapshotInfoList"       // v1beta2, v1
)

// infoOnly are the fields of a volumeSnapshotInfoList entry that v1beta1's pairs lack.
var infoOnly = []string{"creationTime", "readyToUse", "restoreSize"}

// kinds are the kinds of Group; only the content's schema differs between versions (the
// group snapshot and the class differ in validation rules only).
var kinds = map[string]bool{"VolumeGroupSnapshotContent": true, "VolumeGroupSnapshot": true, "VolumeGroupSnapshotClass": true}

var versions = map[string]bool{V1: true, V1beta1: true, V1beta2: true}

// Convert returns obj in apiVersion to; obj is not changed. It fails for an object of
// another group or kind, an unknown version, and a v1beta1 content whose InfoListAnnotation
// is not a list of objects.
func Convert(obj *unstructured.Unstructured, to string) (*unstructured.Unstructured, error) {
	from, kind := obj.GetAPIVersion(), obj.GetKind()
	if !kinds[kind] || !versions[from] {
		return nil, fmt.Errorf("cannot convert %s %s: this webhook converts the kinds of %s v1, v1beta1 and v1beta2 only", from, kind, Group)
	}
	if !versions[to] {
		return nil, fmt.Errorf("cannot convert %s %s to %s: this webhook converts to %s v1, v1beta1 and v1beta2 only", kind, obj.GetName(), to, Group)
	}
	out := obj.DeepCopy()
	if kind == "VolumeGroupSnapshotContent" {
		var err error
		switch {
		case from == V1beta1 && to != V1beta1:
			err = contentUp(out)
		case from != V1beta1 && to == V1beta1:
			err = contentDown(out)
		}
		if err != nil {
			return nil, fmt.Errorf("cannot convert VolumeGroupSnapshotContent %s from %s to %s: %w", obj.GetName(), from, to, err)
		}
	}
	out.SetAPIVersion(to)
	return out, nil
}

// contentDown turns a v1beta2 (or v1) content into v1beta1: each info entry becomes a pair,
// and the full list goes into the annotation, unless the pairs already say everything it
// says (no entry has a field a pair lacks), so that a content written as v1beta1 reads back
// as it was written.
func contentDown(obj *unstructured.Unstructured) error {
	list, found, err := unstructured.NestedSlice(obj.Object, "status", infoList)
	if err != nil {
		return fmt.Errorf("status.%s: %w", infoList, err)
	}
	if !found {
		return nil
	}
	pairs := make([]any, 0, len(list))
	extra := false
	for i, e := range list {
		entry, ok := e.(map[string]any)
		if !ok {
			return fmt.Errorf("status.%s[%d] is not an object", infoList, i)
		}
		pair := maps.Clone(entry)
		for _, k := range infoOnly {
			if _, ok := pair[k]; ok {
				delete(pair, k)
				extra = true
			}
		}
		pairs = append(pairs, pair)
	}
	if extra {
		b, err := json.Marshal(list)
		if err != nil {
			return fmt.Errorf("status.%s: %w", infoList, err)
		}
		setAnnotation(obj, InfoListAnnotation, string(b))
	}
	unstructured.RemoveNestedField(obj.Object, "status", infoList)
	return unstructured.SetNestedSlice(obj.Object, pairs, "status", pairList)
}

// contentUp turns a v1beta1 content into v1beta2 (or v1): the pairs become info entries,
// each completed from the annotation's entry of the same volume and snapshot handles, and the
// annotation goes. The pairs decide which entries there are, so that a v1beta1 client's
// change of the list is kept; a content with the annotation and no pairs takes the
// annotation's list, as upstream.
func contentUp(obj *unstructured.Unstructured) error {
	saved, err := savedInfo(obj)
	if err != nil {
		return err
	}
	pairs, found, err := unstructured.NestedSlice(obj.Object, "status", pairList)
	if err != nil {
		return fmt.Errorf("status.%s: %w", pairList, err)
	}
	removeAnnotation(obj, InfoListAnnotation)
	if !found {
		if saved == nil {
			return nil
		}
		return unstructured.SetNestedSlice(obj.Object, saved, "status", infoList)
	}
	entries := make([]any, 0, len(pairs))
	for i, p := range pairs {
		pair, ok := p.(map[string]any)
		if !ok {
			return fmt.Errorf("status.%s[%d] is not an object", pairList, i)
		}
		entry := maps.Clone(pair)
		if s := matching(saved, pair); s != nil {
			for _, k := range infoOnly {
				if v, ok := s[k]; ok {
					entry[k] = v
				}
			}
		}
		entries = append(entries, entry)
	}
	unstructured.RemoveNestedField(obj.Object, "status", pairList)
	return unstructured.SetNestedSlice(obj.Object, entries, "status", infoList)
}

// savedInfo returns the annotation's list, nil without the annotation.
func savedInfo(obj *unstructured.Unstructured) ([]any, error) {
	v, ok := obj.GetAnnotations()[InfoListAnnotation]
	if !ok {
		return nil, nil
	}
	var list []any
	d := json.NewDecoder(strings.NewReader(v))
	d.UseNumber() // sizes and nanosecond times do not fit a float64
	if err := d.Decode(&list); err != nil {
		return nil, fmt.Errorf("annotation %s is not a JSON list of volumeSnapshotInfoList entries: %w", InfoListAnnotation, err)
	}
	for i, e := range list {
		entry, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("annotation %s: entry %d is not an object", InfoListAnnotation, i)
		}
		// As the object's own integers: int64.
		for k, v := range entry {
			if n, ok := v.(json.Number); ok {
				n64, err := n.Int64()
				if err != nil {
					return nil, fmt.Errorf("annotation %s: entry %d: %s: %w", InfoListAnnotation, i, k, err)
				}
				entry[k] = n64
			}
		}
	}
	return list, nil
}

// matching returns the saved entry of the pair's volume and snapshot handles, or nil.
func matching(saved []any, pair map[string]any) map[string]any {
	for _, e := range saved {
		s := e.(map[string]any)
		if s["volumeHandle"] == pair["volumeHandle"] && s["snapshotHandle"] == pair["snapshotHandle"] {
			return s
		}
	}
	return nil
}

func setAnnotation(obj *unstructured.Unstructured, key, value string) {
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	obj.SetAnnotations(ann)
}

func removeAnnotation(obj *unstructured.Unstructured, key string) {
	ann := obj.GetAnnotations()
	if _, ok := ann[key]; !ok {
		return
	}
	delete(ann, key)
	if len(ann) == 0 {
		ann = nil
	}
	obj.SetAnnotations(ann)
}
