package conversion

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// obj reads a YAML object, with the integers as int64 as the API server's JSON decoding has
// them.
func obj(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

// The status of one content in each version: two members, the second of which lacks the
// fields v1beta1 has no room for.
const (
	beta2Content = `
apiVersion: groupsnapshot.storage.k8s.io/v1beta2
kind: VolumeGroupSnapshotContent
metadata: {name: c, uid: u1, annotations: {keep: me}}
spec: {driver: d, deletionPolicy: Delete, volumeGroupSnapshotRef: {name: g, namespace: ns}, source: {volumeHandles: [va, vb]}}
status:
  readyToUse: true
  volumeGroupSnapshotHandle: gh
  volumeSnapshotInfoList:
  - {volumeHandle: va, snapshotHandle: sa, creationTime: 1700000000123456789, readyToUse: true, restoreSize: 9007199254740993}
  - {volumeHandle: vb, snapshotHandle: sb}
`
	beta1Content = `
apiVersion: groupsnapshot.storage.k8s.io/v1beta1
kind: VolumeGroupSnapshotContent
metadata:
  name: c
  uid: u1
  annotations:
    keep: me
    groupsnapshot.storage.kubernetes.io/volume-snapshot-info-list: '[{"creationTime":1700000000123456789,"readyToUse":true,"restoreSize":9007199254740993,"snapshotHandle":"sa","volumeHandle":"va"},{"snapshotHandle":"sb","volumeHandle":"vb"}]'
spec: {driver: d, deletionPolicy: Delete, volumeGroupSnapshotRef: {name: g, namespace: ns}, source: {volumeHandles: [va, vb]}}
status:
  readyToUse: true
  volumeGroupSnapshotHandle: gh
  volumeSnapshotHandlePairList:
  - {volumeHandle: va, snapshotHandle: sa}
  - {volumeHandle: vb, snapshotHandle: sb}
`
	// A content written as v1beta1 by a v1beta1 client: no annotation.
	plainBeta1 = `
apiVersion: groupsnapshot.storage.k8s.io/v1beta1
kind: VolumeGroupSnapshotContent
metadata: {name: c}
spec: {driver: d}
status:
  volumeSnapshotHandlePairList:
  - {volumeHandle: va, snapshotHandle: sa}
`
	plainBeta2 = `
apiVersion: groupsnapshot.storage.k8s.io/v1beta2
kind: VolumeGroupSnapshotContent
metadata: {name: c}
spec: {driver: d}
status:
  volumeSnapshotInfoList:
  - {volumeHandle: va, snapshotHandle: sa}
`
)

// withVersion is s in apiVersion v.
func withVersion(s, v string) string {
	return strings.Replace(s, "apiVersion: groupsnapshot.storage.k8s.io/v1beta2", "apiVersion: "+v, 1)
}

func TestConvert(t *testing.T) {
	for _, tc := range []struct{ name, in, to, want string }{
		{"content v1beta2 to v1beta1: pairs, and the full list in the annotation", beta2Content, V1beta1, beta1Content},
		{"content v1 to v1beta1, as from v1beta2", withVersion(beta2Content, V1), V1beta1, beta1Content},
		{"content v1beta1 to v1beta2: the annotation's fields come back, the annotation goes", beta1Content, V1beta2, beta2Content},
		{"content v1beta1 to v1, as to v1beta2", beta1Content, V1, withVersion(beta2Content, V1)},
		{"content v1beta2 to v1: unchanged", beta2Content, V1, withVersion(beta2Content, V1)},
		{"content v1 to v1beta2: unchanged", withVersion(beta2Content, V1), V1beta2, beta2Content},
		{"content without annotation v1beta1 to v1beta2: the pairs renamed", plainBeta1, V1beta2, plainBeta2},
		{"content of pairs only v1beta2 to v1beta1: no annotation needed", plainBeta2, V1beta1, plainBeta1},
		{"content without status", "apiVersion: " + V1beta1 + "\nkind: VolumeGroupSnapshotContent\nmetadata: {name: c}\nspec: {driver: d}\n", V1,
			"apiVersion: " + V1 + "\nkind: VolumeGroupSnapshotContent\nmetadata: {name: c}\nspec: {driver: d}\n"},
		{"v1beta1 content with the annotation and no status: the annotation's list, as upstream", `
apiVersion: groupsnapshot.storage.k8s.io/v1beta1
kind: VolumeGroupSnapshotContent
metadata: {name: c, annotations: {groupsnapshot.storage.kubernetes.io/volume-snapshot-info-list: '[{"volumeHandle":"va","snapshotHandle":"sa","readyToUse":true}]'}}
`, V1beta2, `
apiVersion: groupsnapshot.storage.k8s.io/v1beta2
kind: VolumeGroupSnapshotContent
metadata: {name: c}
status: {volumeSnapshotInfoList: [{volumeHandle: va, snapshotHandle: sa, readyToUse: true}]}
`},
		{"a v1beta1 client's change of the pairs wins over the annotation", `
apiVersion: groupsnapshot.storage.k8s.io/v1beta1
kind: VolumeGroupSnapshotContent
metadata: {name: c, annotations: {groupsnapshot.storage.kubernetes.io/volume-snapshot-info-list: '[{"volumeHandle":"va","snapshotHandle":"sa","readyToUse":true},{"volumeHandle":"vb","snapshotHandle":"sb","readyToUse":true}]'}}
status: {volumeSnapshotHandlePairList: [{volumeHandle: va, snapshotHandle: sa}, {volumeHandle: vc, snapshotHandle: sc}]}
`, V1, `
apiVersion: groupsnapshot.storage.k8s.io/v1
kind: VolumeGroupSnapshotContent
metadata: {name: c}
status: {volumeSnapshotInfoList: [{volumeHandle: va, snapshotHandle: sa, readyToUse: true}, {volumeHandle: vc, snapshotHandle: sc}]}
`},
		{"group snapshot v1beta1 to v1: the apiVersion only", `
apiVersion: groupsnapshot.storage.k8s.io/v1beta1
kind: VolumeGroupSnapshot
metadata: {name: g, namespace: ns}
spec: {source: {selector: {matchLabels: {app: db}}}}
status: {readyToUse: true, creationTime: "2026-01-02T03:04:05Z"}
`, V1, `
apiVersion: groupsnapshot.storage.k8s.io/v1
kind: VolumeGroupSnapshot
metadata: {name: g, namespace: ns}
spec: {source: {selector: {matchLabels: {app: db}}}}
status: {readyToUse: true, creationTime: "2026-01-02T03:04:05Z"}
`},
		{"class v1 to v1beta1: the apiVersion only", "apiVersion: " + V1 + "\nkind: VolumeGroupSnapshotClass\nmetadata: {name: k}\ndriver: d\ndeletionPolicy: Retain\n", V1beta1,
			"apiVersion: " + V1beta1 + "\nkind: VolumeGroupSnapshotClass\nmetadata: {name: k}\ndriver: d\ndeletionPolicy: Retain\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := obj(t, tc.in)
			before := in.DeepCopy()
			got, err := Convert(in, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(in, before) {
				t.Error("the input object was changed")
			}
			if want := obj(t, tc.want); !equality.Semantic.DeepEqual(got.Object, want.Object) {
				g, _ := yaml.Marshal(got.Object)
				w, _ := yaml.Marshal(want.Object)
				t.Errorf("got\n%s\nwant\n%s", g, w)
			}
		})
	}
}

// Every version taken to every other and back is the object it was, for each kind.
func TestRoundTrips(t *testing.T) {
	all := []string{V1, V1beta1, V1beta2}
	objects := map[string]string{
		V1beta2: beta2Content, V1: withVersion(beta2Content, V1), V1beta1: beta1Content,
	}
	for _, from := range all {
		for _, s := range []string{objects[from], map[string]string{V1beta1: plainBeta1, V1beta2: plainBeta2, V1: withVersion(plainBeta2, V1)}[from]} {
			for _, via := range all {
				if via == from {
					continue
				}
				orig := obj(t, s)
				mid, err := Convert(orig, via)
				if err != nil {
					t.Fatalf("%s to %s: %v", from, via, err)
				}
				back, err := Convert(mid, from)
				if err != nil {
					t.Fatalf("%s to %s and back: %v", from, via, err)
				}
				if !equality.Semantic.DeepEqual(back.Object, orig.Object) {
					g, _ := yaml.Marshal(back.Object)
					t.Errorf("%s to %s and back is\n%s\nnot\n%s", from, via, g, s)
				}
			}
		}
	}
}

func TestConvertRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, to, want string }{
		{"annotation not JSON", `
apiVersion: groupsnapshot.storage.k8s.io/v1beta1
kind: VolumeGroupSnapshotContent
metadata: {name: broken, annotations: {groupsnapshot.storage.kubernetes.io/volume-snapshot-info-list: 'not json'}}
status: {volumeSnapshotHandlePairList: [{volumeHandle: va, snapshotHandle: sa}]}
`, V1beta2, "VolumeGroupSnapshotContent broken from groupsnapshot.storage.k8s.io/v1beta1 to groupsnapshot.storage.k8s.io/v1beta2: annotation groupsnapshot.storage.kubernetes.io/volume-snapshot-info-list is not a JSON list"},
		{"annotation a list of strings", `
apiVersion: groupsnapshot.storage.k8s.io/v1beta1
kind: VolumeGroupSnapshotContent
metadata: {name: broken, annotations: {groupsnapshot.storage.kubernetes.io/volume-snapshot-info-list: '["x"]'}}
`, V1, "entry 0 is not an object"},
		{"annotation with a fraction", `
apiVersion: groupsnapshot.storage.k8s.io/v1beta1
kind: VolumeGroupSnapshotContent
metadata: {name: broken, annotations: {groupsnapshot.storage.kubernetes.io/volume-snapshot-info-list: '[{"restoreSize":1.5}]'}}
`, V1, "restoreSize"},
		{"another kind", "apiVersion: " + V1 + "\nkind: VolumeSnapshot\nmetadata: {name: s}\n", V1beta1, "converts the kinds of groupsnapshot.storage.k8s.io"},
		{"another group", "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeGroupSnapshotContent\nmetadata: {name: s}\n", V1beta1, "converts the kinds of groupsnapshot.storage.k8s.io"},
		{"an unknown target", "apiVersion: " + V1 + "\nkind: VolumeGroupSnapshotContent\nmetadata: {name: c}\n", Group + "/v2", "to groupsnapshot.storage.k8s.io/v2"},
		{"an unknown source", "apiVersion: " + Group + "/v1alpha1\nkind: VolumeGroupSnapshotContent\nmetadata: {name: c}\n", V1, "v1alpha1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Convert(obj(t, tc.in), tc.to)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}
