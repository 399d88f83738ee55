package up

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kubevol/kubevol/internal/component/snapshotter/conversion"
)

// groupContents is the VolumeGroupSnapshotContent resource in version v.
func groupContents(dyn dynamic.Interface, v string) dynamic.ResourceInterface {
	return dyn.Resource(schema.GroupVersionResource{Group: conversion.Group, Version: v, Resource: "volumegroupsnapshotcontents"})
}

// groupContent is a pre-provisioned VolumeGroupSnapshotContent of a driver nothing serves,
// so that no controller acts on it.
func groupContent(v, name string, annotations map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": conversion.Group + "/" + v, "kind": "VolumeGroupSnapshotContent", "metadata": meta,
		"spec": map[string]any{
			"driver": "conversion.example.com", "deletionPolicy": "Retain",
			"volumeGroupSnapshotRef": map[string]any{"name": "g", "namespace": "default"},
			"source":                 map[string]any{"groupSnapshotHandles": map[string]any{"volumeGroupSnapshotHandle": "gh", "volumeSnapshotHandles": []any{"sa", "sb"}}},
		},
	}}
}

// createWithStatus creates obj in version v and writes status through the subresource.
func createWithStatus(ctx context.Context, t *testing.T, dyn dynamic.Interface, v string, obj *unstructured.Unstructured, status map[string]any) {
	t.Helper()
	out, err := groupContents(dyn, v).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s as %s: %v", obj.GetName(), v, err)
	}
	out.Object["status"] = status
	if _, err := groupContents(dyn, v).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write the status of %s as %s: %v", obj.GetName(), v, err)
	}
}

func read(ctx context.Context, t *testing.T, dyn dynamic.Interface, v, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := groupContents(dyn, v).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read %s as %s: %v", name, v, err)
	}
	return u
}

// checkGroupConversion proves, on the API server of `kubevol up`, that the group contents it
// stores as v1beta2 are served in each version through its snapshot-conversion-webhook: one
// written as v1beta1 reads as v1 and v1beta2 with volumeSnapshotInfoList, and as v1beta1 as
// it was written; one written as v1 reads as v1beta1 with volumeSnapshotHandlePairList and
// the fields v1beta1 lacks in the annotation, and as v1beta2 as it was written; one the
// webhook cannot convert is refused with a message naming it and what is wrong. It returns
// the name of a content to read again after a restart.
func checkGroupConversion(ctx context.Context, t *testing.T, cfg *rest.Config) string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(quiet(cfg))
	if err != nil {
		t.Fatal(err)
	}
	pairs := []any{map[string]any{"volumeHandle": "va", "snapshotHandle": "sa"}, map[string]any{"volumeHandle": "vb", "snapshotHandle": "sb"}}
	createWithStatus(ctx, t, dyn, "v1beta1", groupContent("v1beta1", "conv-beta1", nil), map[string]any{"volumeGroupSnapshotHandle": "gh", "volumeSnapshotHandlePairList": pairs})
	for _, v := range []string{"v1", "v1beta2"} {
		u := read(ctx, t, dyn, v, "conv-beta1")
		list, _, _ := unstructured.NestedSlice(u.Object, "status", "volumeSnapshotInfoList")
		_, old, _ := unstructured.NestedSlice(u.Object, "status", "volumeSnapshotHandlePairList")
		if !jsonEqual(list, pairs) || old || u.GetAnnotations()[conversion.InfoListAnnotation] != "" {
			t.Errorf("a v1beta1 content read as %s: status %v, annotations %v", v, u.Object["status"], u.GetAnnotations())
		}
	}
	if u := read(ctx, t, dyn, "v1beta1", "conv-beta1"); !jsonEqual(u.Object["status"], map[string]any{"volumeGroupSnapshotHandle": "gh", "volumeSnapshotHandlePairList": pairs}) || len(u.GetAnnotations()) != 0 {
		t.Errorf("a v1beta1 content read back as v1beta1: status %v, annotations %v", u.Object["status"], u.GetAnnotations())
	}

	info := []any{
		map[string]any{"volumeHandle": "va", "snapshotHandle": "sa", "creationTime": int64(1700000000123456789), "readyToUse": true, "restoreSize": int64(16 << 20)},
		map[string]any{"volumeHandle": "vb", "snapshotHandle": "sb", "readyToUse": false},
	}
	createWithStatus(ctx, t, dyn, "v1", groupContent("v1", "conv-v1", nil), map[string]any{"volumeSnapshotInfoList": info, "readyToUse": false})
	u := read(ctx, t, dyn, "v1beta1", "conv-v1")
	got, _, _ := unstructured.NestedSlice(u.Object, "status", "volumeSnapshotHandlePairList")
	var saved []any
	d := json.NewDecoder(strings.NewReader(u.GetAnnotations()[conversion.InfoListAnnotation]))
	d.UseNumber() // nanoseconds do not fit a float64
	if err := d.Decode(&saved); err != nil || !jsonEqual(got, pairs) || !jsonEqual(saved, info) {
		t.Errorf("a v1 content read as v1beta1: status %v, annotations %v (%v)", u.Object["status"], u.GetAnnotations(), err)
	}
	if u := read(ctx, t, dyn, "v1beta2", "conv-v1"); !jsonEqual(u.Object["status"], map[string]any{"volumeSnapshotInfoList": info, "readyToUse": false}) || len(u.GetAnnotations()) != 0 {
		t.Errorf("a v1 content read as v1beta2: status %v, annotations %v", u.Object["status"], u.GetAnnotations())
	}

	// A v1beta1 content whose annotation is not the list it must be cannot be stored.
	broken := groupContent("v1beta1", "conv-broken", map[string]any{conversion.InfoListAnnotation: "not a list"})
	_, err = groupContents(dyn, "v1beta1").Create(ctx, broken, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("a v1beta1 content with an unreadable annotation was stored")
	}
	t.Logf("refused: %v", err)
	for _, want := range []string{"conversion webhook", "VolumeGroupSnapshotContent conv-broken", conversion.InfoListAnnotation, "is not a JSON list"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if err := groupContents(dyn, "v1").Delete(ctx, "conv-beta1", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	return "conv-v1"
}

// checkStillConverted reads the content as v1beta1 again: after a restart of `kubevol up`,
// the CRD names the new webhook's port and certificate.
func checkStillConverted(ctx context.Context, t *testing.T, cfg *rest.Config, name string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(quiet(cfg))
	if err != nil {
		t.Fatal(err)
	}
	u := read(ctx, t, dyn, "v1beta1", name)
	if _, ok, _ := unstructured.NestedSlice(u.Object, "status", "volumeSnapshotHandlePairList"); !ok {
		t.Errorf("after the restart, %s read as v1beta1 has status %v", name, u.Object["status"])
	}
	if err := groupContents(dyn, "v1").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// quiet is cfg without the API server's deprecation warnings of v1beta1, which the test uses
// on purpose.
func quiet(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.WarningHandler = rest.NoWarnings{}
	return c
}

// jsonEqual compares a and b as JSON.
func jsonEqual(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}
