package podstatus

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestPodStatusWriter(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	client := fake.NewClientset(pod)
	w := New(client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)

	condition := func() *v1.PodCondition {
		p, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == VolumesReadyCondition {
				return &p.Status.Conditions[i]
			}
		}
		return nil
	}
	eventually := func(what string, f func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) { return f(), nil }); err != nil {
			t.Fatalf("timed out: %s", what)
		}
	}

	w.VolumesFailed(pod, "configmap \"x\" not found")
	eventually("False condition", func() bool {
		c := condition()
		return c != nil && c.Status == v1.ConditionFalse && c.Reason == ReasonFailedMount && c.Message == "configmap \"x\" not found"
	})
	w.VolumesReady(pod)
	eventually("True condition", func() bool { c := condition(); return c != nil && c.Status == v1.ConditionTrue })

	// A terminal pod is left alone; a pod being deleted is deleted once torn down.
	w.VolumesTornDown(pod)
	w.mu.Lock()
	wish := w.wants[pod.UID]
	w.mu.Unlock()
	if wish.delete {
		t.Fatal("the writer wants a pod without deletionTimestamp deleted")
	}
	if _, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod without deletionTimestamp deleted: %v", err)
	}
	now := metav1.Now()
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &now
	w.VolumesTornDown(deleting)
	eventually("pod deleted", func() bool {
		_, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// A write the API server refuses is retried, and a newer wish replaces the failed one.
func TestPodStatusWriterRetries(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	client := fake.NewClientset(pod)
	var failures atomic.Int32
	failures.Store(3)
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(-1) >= 0 {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	w := New(client)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	w.VolumesFailed(pod, "first")
	w.VolumesReady(pod)
	deadline := time.Now().Add(10 * time.Second)
	var p *v1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Until(deadline), true, func(ctx context.Context) (bool, error) {
		var err error
		if p, err = client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{}); err != nil {
			return false, err
		}
		return len(p.Status.Conditions) == 1 && p.Status.Conditions[0].Status == v1.ConditionTrue, nil
	}); err != nil {
		t.Fatalf("condition not written after the failures: %v %+v", err, p.Status.Conditions)
	}
	if failures.Load() >= 0 {
		t.Errorf("the writer did not go through the failures: %d left", failures.Load())
	}
}
