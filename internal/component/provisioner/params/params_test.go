package params

import (
	"maps"
	"strings"
	"testing"
)

func TestInterpret(t *testing.T) {
	in := map[string]string{
		"type":                      "fast",
		"csi.storage.k8s.io/fstype": "xfs",
		"csi.storage.k8s.io/provisioner-secret-name":      "s",
		"csi.storage.k8s.io/provisioner-secret-namespace": "n",
		"csiNodeStageSecretName":                          "legacy",
		"csiNodeStageSecretNamespace":                     "legacy-ns",
	}
	got, err := Interpret(in, "ext4", &Metadata{PVCName: "c", PVCNamespace: "ns", PVName: "pvc-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"type": "fast", "csiNodeStageSecretName": "legacy", "csiNodeStageSecretNamespace": "legacy-ns",
		PVCNameKey: "c", PVCNamespaceKey: "ns", PVNameKey: "pvc-1"}
	if !maps.Equal(got.Parameters, want) || got.FSType != "xfs" {
		t.Fatalf("got %+v", got)
	}

	if got, _ := Interpret(map[string]string{"FSType": "ext3"}, "ext4", nil); got.FSType != "ext3" || got.Parameters["FSType"] != "ext3" {
		t.Fatalf("legacy fstype: %+v", got)
	}
	if got, _ := Interpret(nil, "ext4", nil); got.FSType != "ext4" || len(got.Parameters) != 0 {
		t.Fatalf("default: %+v", got)
	}
	for _, bad := range []map[string]string{
		{"csi.storage.k8s.io/fs-type": "xfs"},
		{"csi.storage.k8s.io/fstype": "xfs", "fstype": "ext4"},
	} {
		if _, err := Interpret(bad, "", nil); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	_, err = Interpret(map[string]string{"csi.storage.k8s.io/fs-type": "xfs"}, "", nil)
	if !strings.Contains(err.Error(), `found unknown parameter key "csi.storage.k8s.io/fs-type" with reserved namespace`) {
		t.Errorf("message: %v", err)
	}
}
