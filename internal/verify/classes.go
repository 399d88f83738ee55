package verify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// createClasses makes verify's StorageClasses: the base class's parameters with the binding
// mode, reclaim policy and expansion each case needs.
func (e *env) createClasses(ctx context.Context) error {
	params := map[string]string{}
	var mountOptions []string
	if e.base != nil {
		maps.Copy(params, e.base.Parameters)
		mountOptions = e.base.MountOptions
	}
	blockParams := maps.Clone(params)
	maps.Copy(blockParams, e.o.BlockParameters)
	fsParams := maps.Clone(blockParams)
	fsParams[fsTypeParameter] = "xfs"
	wffc, immediate := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	del, retain := corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRetain
	var allowed []corev1.TopologySelectorTerm
	if len(e.topology) > 0 {
		var exprs []corev1.TopologySelectorLabelRequirement
		for k, v := range e.topology {
			exprs = append(exprs, corev1.TopologySelectorLabelRequirement{Key: k, Values: []string{v}})
		}
		allowed = []corev1.TopologySelectorTerm{{MatchLabelExpressions: exprs}}
	}
	for _, v := range []struct {
		name    string
		params  map[string]string
		binding storagev1.VolumeBindingMode
		reclaim corev1.PersistentVolumeReclaimPolicy
		allowed []corev1.TopologySelectorTerm
	}{
		{classWFFC, params, wffc, del, nil},
		{classImmediate, params, immediate, del, allowed},
		{classRetain, params, immediate, retain, allowed},
		{classBlock, blockParams, wffc, del, nil},
		{classFS, fsParams, wffc, del, nil},
		{classOptions, params, wffc, retain, nil},
	} {
		name := fmt.Sprintf("kubevol-verify-%s-%s", e.runID, v.name)
		sc := &storagev1.StorageClass{
			ObjectMeta:           metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: e.runID}},
			Provisioner:          e.driver,
			Parameters:           v.params,
			MountOptions:         mountOptions,
			ReclaimPolicy:        &v.reclaim,
			VolumeBindingMode:    &v.binding,
			AllowVolumeExpansion: ptr.To(true),
			AllowedTopologies:    v.allowed,
		}
		if v.name == classOptions {
			sc.MountOptions = e.o.MountOptions
		}
		if _, err := e.cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create StorageClass %s: %w", name, err)
		}
		e.classes[v.name] = name
	}
	return nil
}

// removeClasses deletes the StorageClasses and the VolumeSnapshotClass of the run.
func (e *env) removeClasses() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, name := range e.classes {
		if err := e.cs.StorageV1().StorageClasses().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	e.classes = map[string]string{}
	for _, name := range e.snapshotClasses {
		if err := e.dyn.Resource(kubecheck.SnapshotClassGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	e.snapshotClasses = nil
	return errors.Join(errs...)
}
