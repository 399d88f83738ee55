// Package kubecheck holds the checks on a cluster's volumes that kubevol verify, the
// kubevol up demo and the end-to-end tests share: waiting for claims, volumes, pods and
// events, applying manifests, reading metrics pages and the mount table. It returns errors
// and never depends on package testing, so that the kubevol command can use it; so one piece
// of code decides a behaviour for verify and for the tests alike.
package kubecheck

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Interval is how often the waits of this package read the cluster again.
const Interval = 200 * time.Millisecond

// Poll calls cond every Interval, at once first, until it holds, it returns an error, or
// timeout passes.
func Poll(ctx context.Context, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, Interval, timeout, true, cond)
}

// WaitGone waits until get reports NotFound.
func WaitGone(ctx context.Context, timeout time.Duration, get func(context.Context) error) error {
	return Poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	})
}

// WaitPVGone waits for the PersistentVolume name to be deleted (and so, for reclaim policy
// Delete, its volume by the provisioner).
func WaitPVGone(ctx context.Context, cs kubernetes.Interface, name string, timeout time.Duration) error {
	err := WaitGone(ctx, timeout, func(ctx context.Context) error {
		_, err := cs.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("PV %s not deleted: %w", name, err)
	}
	return nil
}

// WaitPodGone waits for the pod to be deleted: the node finishes the deletion of a pod only
// once its volumes are torn down.
func WaitPodGone(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	err := WaitGone(ctx, timeout, func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s not deleted (its volumes were not torn down): %w", ns, name, err)
	}
	return nil
}

// DeletePod deletes the pod, if it is there, and waits until it is gone.
func DeletePod(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return WaitPodGone(ctx, cs, ns, name, timeout)
}
