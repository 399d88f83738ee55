package verify

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

func capacityApplies(e *env) string {
	if c := e.csiDriver.Spec.StorageCapacity; c == nil || !*c {
		return "CSIDriver storageCapacity is false: no CSIStorageCapacity objects are published or used"
	}
	return ""
}

// capacityObjects: a new StorageClass of the driver gets a CSIStorageCapacity for the
// node's topology segment, with a capacity, and loses it when the class goes (upstream's
// capacity "provides storage capacity information").
func capacityObjects(k *caseEnv) error {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: fmt.Sprintf("kubevol-verify-%s-capacity-%s", k.runID, rand.String(4)), Labels: map[string]string{runLabel: k.runID}},
		Provisioner:       k.driver,
		VolumeBindingMode: &wffc,
	}
	if k.base != nil {
		sc.Parameters = maps.Clone(k.base.Parameters)
	}
	if _, err := k.cs.StorageV1().StorageClasses().Create(k.ctx, sc, metav1.CreateOptions{}); err != nil {
		return err
	}
	deleted := false
	defer func() {
		if !deleted {
			_ = k.cs.StorageV1().StorageClasses().Delete(context.WithoutCancel(k.ctx), sc.Name, metav1.DeleteOptions{})
		}
	}()
	var last []storagev1.CSIStorageCapacity
	err := kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		var err error
		last, err = k.capacities(ctx, sc.Name)
		return err == nil && checkCapacities(last, k.topology) == nil, nil
	})
	if err != nil {
		if len(last) == 0 {
			return fmt.Errorf("no CSIStorageCapacity for StorageClass %s: %w", sc.Name, err)
		}
		return checkCapacities(last, k.topology)
	}
	if err := k.cs.StorageV1().StorageClasses().Delete(k.ctx, sc.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	deleted = true
	err = kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		var err error
		last, err = k.capacities(ctx, sc.Name)
		return err == nil && len(last) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d CSIStorageCapacity objects outlive their StorageClass %s", len(last), sc.Name)
	}
	return nil
}

func (k *caseEnv) capacities(ctx context.Context, class string) ([]storagev1.CSIStorageCapacity, error) {
	list, err := k.cs.StorageV1().CSIStorageCapacities(corev1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []storagev1.CSIStorageCapacity
	for _, c := range list.Items {
		if c.StorageClassName == class {
			out = append(out, c)
		}
	}
	return out, nil
}

// checkCapacities wants one object whose topology selects the node's segment, with a
// capacity.
func checkCapacities(caps []storagev1.CSIStorageCapacity, segment map[string]string) error {
	for _, c := range caps {
		if c.NodeTopology == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.NodeTopology)
		if err != nil || !sel.Matches(labels.Set(segment)) {
			continue
		}
		if c.Capacity == nil {
			return fmt.Errorf("CSIStorageCapacity %s/%s for the node's segment has no capacity", c.Namespace, c.Name)
		}
		return nil
	}
	return fmt.Errorf("no CSIStorageCapacity of the %d for the class selects the node's topology segment %v", len(caps), segment)
}
