package kubecheck

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
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
