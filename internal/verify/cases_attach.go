package verify

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

func attachApplies(e *env) string {
	if !e.attachRequired() {
		return "CSIDriver attachRequired is false"
	}
	if r := e.lacks(csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME); r != "" {
		return r + " (attach is trivial)"
	}
	return ""
}

// attachDetach: the pod's volume gets an attached VolumeAttachment for its node before it
// is mounted, and the attachment goes once the pod is gone.
func attachDetach(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	if _, err := k.runPod("app", []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, nil); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	va, err := k.attachment(pv.Name)
	if err != nil {
		return err
	}
	if va == nil || !va.Status.Attached {
		return fmt.Errorf("no attached VolumeAttachment for PV %s on node %s while its pod is ready", pv.Name, k.node)
	}
	if err := k.deletePod("app"); err != nil {
		return err
	}
	var last *storagev1.VolumeAttachment
	err = kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		last, err = k.attachment(pv.Name)
		return err == nil && last == nil, nil
	})
	if err != nil {
		detail := ""
		if last != nil && last.Status.DetachError != nil {
			detail = ": " + last.Status.DetachError.Message
		}
		return fmt.Errorf("VolumeAttachment of PV %s not removed after its pod was deleted%s", pv.Name, detail)
	}
	return nil
}

func (k *caseEnv) attachment(pv string) (*storagev1.VolumeAttachment, error) {
	list, err := k.cs.StorageV1().VolumeAttachments().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, va := range list.Items {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv && va.Spec.NodeName == k.node {
			return &va, nil
		}
	}
	return nil, nil
}
