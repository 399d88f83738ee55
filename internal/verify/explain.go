package verify

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// explain gathers what Kubernetes said about a failure: the last Warning events of the case's
// namespace, then what is still waiting (stuck). The
// CSI errors reach users this way (ProvisioningFailed, FailedMount, FailedAttachVolume...).
func (k *caseEnv) explain() string {
	if k == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lines []string
	if evs, err := k.cs.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"}); err == nil {
		sort.Slice(evs.Items, func(i, j int) bool { return eventTime(evs.Items[i]).Before(eventTime(evs.Items[j])) })
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			line := fmt.Sprintf("event %s on %s/%s: %s", ev.Reason, strings.ToLower(ev.InvolvedObject.Kind), ev.InvolvedObject.Name, ev.Message)
			if !seen[line] {
				seen[line] = true
				lines = append(lines, line)
			}
		}
	}
	if len(lines) > 4 {
		lines = lines[len(lines)-4:]
	}
	return strings.Join(append(lines, k.stuck(ctx)...), "\n")
}

// stuck describes what of the case is still waiting: pods whose volumes are not ready (with
// their node and the condition's reason even when it says nothing more, as while a volume
// waits for its attach), the VolumeAttachments of the case's volumes that are not attached
// or are being deleted, and, for a driver that needs attaching, the volumes of those pods
// that have no VolumeAttachment on the pod's node at all: the attach/detach controller has
// not asked for them, which no event says.
func (k *caseEnv) stuck(ctx context.Context) []string {
	var lines []string
	var waiting []corev1.Pod
	if pods, err := k.cs.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			if kubecheck.VolumesUp(&p) {
				continue
			}
			line := fmt.Sprintf("pod %s not ready: node %q, phase %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			for _, c := range p.Status.Conditions {
				if (c.Type == kubecheck.VolumesReady || c.Type == corev1.PodScheduled) && c.Status != corev1.ConditionTrue {
					line += fmt.Sprintf("; %s: %s %s", c.Type, c.Reason, c.Message)
				}
			}
			lines = append(lines, line)
			waiting = append(waiting, p)
		}
	}
	pvs, err := k.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return lines
	}
	ours := map[string]bool{}
	pvOf := map[string]string{} // claim name -> PV name
	for _, pv := range pvs.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == k.ns {
			ours[pv.Name] = true
			pvOf[ref.Name] = pv.Name
		}
	}
	vas, err := k.cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return lines
	}
	exists := map[[2]string]bool{} // PV name, node
	for _, va := range vas.Items {
		pv := va.Spec.Source.PersistentVolumeName
		if pv == nil || !ours[*pv] {
			continue
		}
		exists[[2]string{*pv, va.Spec.NodeName}] = true
		if va.Status.Attached && va.DeletionTimestamp == nil {
			continue
		}
		line := fmt.Sprintf("VolumeAttachment %s of %s on %s: attached %v", va.Name, *pv, va.Spec.NodeName, va.Status.Attached)
		if va.DeletionTimestamp != nil {
			line += ", being deleted since " + va.DeletionTimestamp.UTC().Format(time.TimeOnly)
		}
		if e := va.Status.AttachError; e != nil {
			line += ", attach error: " + e.Message
		}
		if e := va.Status.DetachError; e != nil {
			line += ", detach error: " + e.Message
		}
		lines = append(lines, line)
	}
	if k.csiDriver == nil || !k.attachRequired() {
		return lines
	}
	for _, p := range waiting {
		if p.Spec.NodeName == "" {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			claim := v.PersistentVolumeClaim.ClaimName
			if pv := pvOf[claim]; pv != "" && !exists[[2]string{pv, p.Spec.NodeName}] {
				lines = append(lines, fmt.Sprintf("no VolumeAttachment of %s (claim %s of pod %s) on %s: the attach/detach controller has not asked for its attach", pv, claim, p.Name, p.Spec.NodeName))
			}
		}
	}
	return lines
}

func eventTime(ev corev1.Event) time.Time {
	if !ev.LastTimestamp.IsZero() {
		return ev.LastTimestamp.Time
	}
	if !ev.EventTime.IsZero() {
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}
