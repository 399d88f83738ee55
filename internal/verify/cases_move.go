package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// rwoMove: a ReadWriteOnce volume moves from a pod on node A to a pod on node B (upstream's
// multiVolume "should access to two volumes ... and retain data across pod recreation on
// different node", for one volume). With attach, pod B is created the moment pod A's
// deletion is asked, so that only the attach/detach controller orders them: the volume must
// be detached from A (its VolumeAttachment gone) before a VolumeAttachment to B exists.
// Without attach nothing in Kubernetes orders two nodes' mounts of a ReadWriteOnce volume,
// so pod B starts after pod A is gone, and A must have unpublished and unstaged it. Either
// way B reads what A wrote. Not applicable for node-local volumes (their PV's affinity).
func rwoMove(k *caseEnv) error {
	others, err := k.otherHostNodes(1)
	if err != nil {
		return err
	}
	a, b := k.node, others[0]
	podA, pv, err := k.claimOn("data", corev1.ReadWriteOnce, "on-a", a, b)
	if err != nil {
		return err
	}
	dirA := mountPathOn(k.nodeRoot(a), podA, pv.Name)
	want, err := k.writeProof(dirA)
	if err != nil {
		return err
	}
	vols := []corev1.Volume{kubecheck.ClaimVolume("data", "data")}
	if !k.attachRequired() {
		if err := k.deletePod("on-a"); err != nil {
			return err
		}
		if err := k.leftNode(pv, k.nodeRoot(a), dirA); err != nil {
			return err
		}
		podB, err := k.runPod("on-b", vols, nil, onNode(b))
		if err != nil {
			return err
		}
		return readProof(mountPathOn(k.nodeRoot(b), podB, pv.Name), want)
	}
	order, stop, err := k.watchAttachments(pv.Name)
	if err != nil {
		return err
	}
	defer stop()
	if err := k.cs.CoreV1().Pods(k.ns).Delete(k.ctx, "on-a", metav1.DeleteOptions{}); err != nil {
		return err
	}
	podB, err := k.runPod("on-b", vols, nil, onNode(b))
	if err != nil {
		return err
	}
	stop()
	if err := detachedFirst(<-order, a, b); err != nil {
		return err
	}
	if err := k.leftNode(pv, k.nodeRoot(a), dirA); err != nil {
		return err
	}
	return readProof(mountPathOn(k.nodeRoot(b), podB, pv.Name), want)
}

// leftNode checks that a node unpublished a PV from a pod's mount path and unstaged it.
func (k *caseEnv) leftNode(pv *corev1.PersistentVolume, root, dir string) error {
	if err := k.waitUnmounted(dir); err != nil {
		return fmt.Errorf("the volume's first node: %w", err)
	}
	if k.hasNode(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		if err := k.waitGone(k.stagingPathOn(root, pv)); err != nil {
			return fmt.Errorf("the volume stays staged on its first node: %w", err)
		}
	}
	return nil
}

// attachEvent is one VolumeAttachment change of a PV, in the order the watch saw them.
type attachEvent struct {
	node    string
	deleted bool
}

// watchAttachments records the VolumeAttachment creations and deletions of a PV until stop;
// the channel then yields them, in order.
func (k *caseEnv) watchAttachments(pv string) (<-chan []attachEvent, func(), error) {
	list, err := k.cs.StorageV1().VolumeAttachments().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	w, err := k.cs.StorageV1().VolumeAttachments().Watch(k.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, nil, err
	}
	out := make(chan []attachEvent, 1)
	go func() {
		var seen []attachEvent
		for ev := range w.ResultChan() {
			va, ok := ev.Object.(*storagev1.VolumeAttachment)
			if !ok || va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != pv {
				continue
			}
			if ev.Type == watch.Added || ev.Type == watch.Deleted {
				seen = append(seen, attachEvent{node: va.Spec.NodeName, deleted: ev.Type == watch.Deleted})
			}
		}
		out <- seen
	}()
	var stopped bool
	return out, func() {
		if !stopped {
			stopped = true
			w.Stop()
		}
	}, nil
}

// detachedFirst: the attachment to b was created only after the one to a was deleted.
func detachedFirst(events []attachEvent, a, b string) error {
	aGone := false
	for _, ev := range events {
		switch {
		case ev.node == a && ev.deleted:
			aGone = true
		case ev.node == b && !ev.deleted:
			if !aGone {
				return fmt.Errorf("a VolumeAttachment to node %s was created while the one to node %s still existed (VolumeAttachment events: %v)", b, a, events)
			}
			return nil
		}
	}
	return fmt.Errorf("no VolumeAttachment to node %s was seen after the one to node %s went (events: %v)", b, a, events)
}

// waitPodGone waits for a pod to be deleted, by the node agent or by anyone else.
func (k *caseEnv) waitPodGone(name string, timeout time.Duration) error {
	return kubecheck.Poll(k.ctx, timeout, func(ctx context.Context) (bool, error) {
		_, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
