package payload

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFromKeys(t *testing.T) {
	data := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	m := int32(0o600)
	dm := int32(0o400)
	got, err := FromKeys(data, []v1.KeyToPath{{Key: "a", Path: "x/a"}, {Key: "b", Path: "b", Mode: &m}}, &dm, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["x/a"].Mode != 0o400 || got["b"].Mode != 0o600 || string(got["x/a"].Data) != "1" {
		t.Errorf("got %+v", got)
	}
	if _, err := FromKeys(data, []v1.KeyToPath{{Key: "missing", Path: "m"}}, nil, false); err == nil {
		t.Error("missing key accepted")
	}
	if got, err := FromKeys(data, []v1.KeyToPath{{Key: "missing", Path: "m"}}, nil, true); err != nil || len(got) != 0 {
		t.Errorf("optional missing key: %v %v", got, err)
	}
	for _, bad := range []string{"/abs", "../up", "a/../../b", "./..data", "./..data_tmp", "."} {
		if _, err := FromKeys(data, []v1.KeyToPath{{Key: "a", Path: bad}}, nil, false); err == nil {
			t.Errorf("path %q accepted", bad)
		}
	}
}

func TestDownwardAPI(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"b": "2", "a": "1"}},
		Spec: v1.PodSpec{NodeName: "n", Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")},
			Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")},
		}}}},
	}
	alloc := v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}
	files, err := DownwardAPI(pod, []v1.DownwardAPIVolumeFile{
		{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
		{Path: "a", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['a']"}},
		{Path: "cpu", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.cpu"}},
		{Path: "cpu_m", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
		{Path: "mem", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
		{Path: "memreq", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: "requests.memory"}},
	}, nil, alloc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"name": "p", "labels": "a=\"1\"\nb=\"2\"", "a": "1", "cpu": "1", "cpu_m": "500", "mem": "1024", "memreq": "67108864"}
	for k, v := range want {
		if string(files[k].Data) != v {
			t.Errorf("%s = %q, want %q", k, files[k].Data, v)
		}
	}
	if _, err := FieldValue(pod, "spec.bogus"); err == nil {
		t.Error("unknown fieldPath accepted")
	}
}
