package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// snapshotsServed reports whether the cluster serves VolumeSnapshots: without the CRD no
// snapshotter can run.
func (e *env) snapshotsServed() bool {
	list, err := e.cs.Discovery().ServerResourcesForGroupVersion(kubecheck.SnapshotGVR.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == kubecheck.SnapshotGVR.Resource {
			return true
		}
	}
	return false
}

var snapshotClassMu sync.Mutex

// ensureSnapshotClass creates the run's VolumeSnapshotClass for the driver, once.
func (e *env) ensureSnapshotClass(ctx context.Context) (string, error) {
	return e.snapshotClassFor(ctx, "Delete")
}

// snapshotClassFor creates the run's VolumeSnapshotClass of a deletion policy (Delete or
// Retain), once.
func (e *env) snapshotClassFor(ctx context.Context, policy string) (string, error) {
	snapshotClassMu.Lock()
	defer snapshotClassMu.Unlock()
	if e.snapshotClasses == nil {
		e.snapshotClasses = map[string]string{}
	}
	if name := e.snapshotClasses[policy]; name != "" {
		return name, nil
	}
	name := "kubevol-verify-" + e.runID
	if policy != "Delete" {
		name += "-" + strings.ToLower(policy)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion":     "snapshot.storage.k8s.io/v1",
		"kind":           "VolumeSnapshotClass",
		"metadata":       map[string]any{"name": name, "labels": map[string]any{runLabel: e.runID}},
		"driver":         e.driver,
		"deletionPolicy": policy,
	}}
	if _, err := e.dyn.Resource(kubecheck.SnapshotClassGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create VolumeSnapshotClass: %w", err)
	}
	e.snapshotClasses[policy] = name
	return name, nil
}

// snapshot takes a VolumeSnapshot of a claim and waits until it is ready to use.
func (k *caseEnv) snapshot(name, claim string) error {
	class, err := k.ensureSnapshotClass(k.ctx)
	if err != nil {
		return err
	}
	_, err = k.snapshotFrom(name, class, map[string]any{"persistentVolumeClaimName": claim})
	return err
}

// snapshotFrom creates a VolumeSnapshot of class (none when "") from source (a claim or a
// pre-provisioned content) and waits until it is ready to use.
func (k *caseEnv) snapshotFrom(name, class string, source map[string]any) (*unstructured.Unstructured, error) {
	spec := map[string]any{"source": source}
	if class != "" {
		spec["volumeSnapshotClassName"] = class
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1",
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": name, "namespace": k.ns},
		"spec":       spec,
	}}
	res := k.dyn.Resource(kubecheck.SnapshotGVR).Namespace(k.ns)
	if _, err := res.Create(k.ctx, obj, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create VolumeSnapshot: %w", err)
	}
	cur, err := kubecheck.WaitReadyToUse(k.ctx, res, name, waitTimeout)
	if err != nil {
		return nil, fmt.Errorf("VolumeSnapshot %w", err)
	}
	return cur, nil
}

// deleteSnapshots deletes the case's VolumeSnapshots and waits until they are gone, with
// their contents and the driver's snapshots (deletionPolicy Delete).
func (k *caseEnv) deleteSnapshots() error {
	if !k.snapshotsServed() {
		return nil
	}
	res := k.dyn.Resource(kubecheck.SnapshotGVR).Namespace(k.ns)
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
		err := kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
			_, err := res.Get(ctx, s.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("VolumeSnapshot %s not deleted: %w", s.GetName(), err))
		}
	}
	return errors.Join(errs...)
}
