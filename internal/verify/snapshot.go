package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	snapshotGVR      = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	snapshotClassGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}
)

// snapshotsServed reports whether the cluster serves VolumeSnapshots: without the CRD no
// snapshotter can run.
func (e *env) snapshotsServed() bool {
	list, err := e.cs.Discovery().ServerResourcesForGroupVersion(snapshotGVR.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == snapshotGVR.Resource {
			return true
		}
	}
	return false
}

var snapshotClassMu sync.Mutex

// ensureSnapshotClass creates the run's VolumeSnapshotClass for the driver, once.
func (e *env) ensureSnapshotClass(ctx context.Context) (string, error) {
	snapshotClassMu.Lock()
	defer snapshotClassMu.Unlock()
	if e.snapshotClass != "" {
		return e.snapshotClass, nil
	}
	name := "kubevol-verify-" + e.runID
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion":     "snapshot.storage.k8s.io/v1",
		"kind":           "VolumeSnapshotClass",
		"metadata":       map[string]any{"name": name, "labels": map[string]any{runLabel: e.runID}},
		"driver":         e.driver,
		"deletionPolicy": "Delete",
	}}
	if _, err := e.dyn.Resource(snapshotClassGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create VolumeSnapshotClass: %w", err)
	}
	e.snapshotClass = name
	return name, nil
}

// snapshot takes a VolumeSnapshot of a claim and waits until it is ready to use.
func (k *caseEnv) snapshot(name, claim string) error {
	class, err := k.ensureSnapshotClass(k.ctx)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1",
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": name, "namespace": k.ns},
		"spec": map[string]any{
			"volumeSnapshotClassName": class,
			"source":                  map[string]any{"persistentVolumeClaimName": claim},
		},
	}}
	res := k.dyn.Resource(snapshotGVR).Namespace(k.ns)
	if _, err := res.Create(k.ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create VolumeSnapshot: %w", err)
	}
	var last string
	err = poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		cur, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if msg, ok, _ := unstructured.NestedString(cur.Object, "status", "error", "message"); ok {
			last = msg
		}
		ready, _, _ := unstructured.NestedBool(cur.Object, "status", "readyToUse")
		return ready, nil
	})
	if err != nil {
		return fmt.Errorf("VolumeSnapshot %s not ready to use: %w (last error: %q)", name, err, last)
	}
	return nil
}

// deleteSnapshots deletes the case's VolumeSnapshots and waits until they are gone, with
// their contents and the driver's snapshots (deletionPolicy Delete).
func (k *caseEnv) deleteSnapshots() error {
	if !k.snapshotsServed() {
		return nil
	}
	res := k.dyn.Resource(snapshotGVR).Namespace(k.ns)
	list, err := res.List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var errs []error
	for _, s := range list.Items {
		if err := res.Delete(k.ctx, s.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		err := poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
			_, err := res.Get(ctx, s.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("VolumeSnapshot %s not deleted: %w", s.GetName(), err))
		}
	}
	return errors.Join(errs...)
}
