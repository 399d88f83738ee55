package kubecheck

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// The snapshot API's resources, as the external-snapshotter's CRDs serve them, for dynamic
// clients (verify needs no typed client of CRDs the cluster may not serve).
var (
	SnapshotGVR           = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	SnapshotContentGVR    = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
	SnapshotClassGVR      = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}
	GroupSnapshotGVR      = schema.GroupVersionResource{Group: "groupsnapshot.storage.k8s.io", Version: "v1", Resource: "volumegroupsnapshots"}
	GroupSnapshotClassGVR = schema.GroupVersionResource{Group: "groupsnapshot.storage.k8s.io", Version: "v1", Resource: "volumegroupsnapshotclasses"}
)

// WaitReadyToUse waits until the object name of res (a VolumeSnapshot, a
// VolumeGroupSnapshot or one of their contents: the snapshot API's objects all have
// status.readyToUse and status.error) is ready to use, and returns it. The error carries
// the last status.error.message the snapshot-controller or the sidecar wrote.
func WaitReadyToUse(ctx context.Context, res dynamic.ResourceInterface, name string, timeout time.Duration) (*unstructured.Unstructured, error) {
	var last string
	var cur *unstructured.Unstructured
	err := Poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		u, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cur = u
		if msg, ok, _ := unstructured.NestedString(u.Object, "status", "error", "message"); ok {
			last = msg
		}
		ready, _, _ := unstructured.NestedBool(u.Object, "status", "readyToUse")
		return ready, nil
	})
	if err != nil {
		return cur, fmt.Errorf("%s not ready to use: %w (last error: %q)", name, err, last)
	}
	return cur, nil
}
