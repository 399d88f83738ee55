package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// With CSIDriver.spec.nodeAllocatableUpdatePeriodSeconds the agent asks the driver for
// NodeGetInfo again at that period and writes a changed max_volumes_per_node to the
// CSINode's allocatable count (the kubelet's mutable CSINode allocatable count).
func TestAllocatableCountRefreshed(t *testing.T) {
	t.Parallel()
	e, countFile := countEnv(t, envOptions{}, 10)
	if err := os.WriteFile(countFile, []byte("7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.poll("allocatable count 7 after the driver's NodeGetInfo changed", e.allocatableCount(7))
}

// An attach the driver refuses with RESOURCE_EXHAUSTED, for a driver whose allocatable
// count is mutable: the attacher writes the code to the VolumeAttachment's
// attachError.errorCode, and the agent reads NodeGetInfo again at once (the CSIDriver's
// period is an hour, so only the reactive refresh can change the count during the test)
// and rejects the pod stuck on the attach, as the 1.36+ kubelet: phase Failed, reason
// VolumeAttachmentLimitExceeded, and a Warning event of that reason.
func TestAttachResourceExhaustedRejectsPod(t *testing.T) {
	t.Parallel()
	e, countFile := countEnv(t, envOptions{attachRequired: true, faults: []string{"ControllerPublishVolume:error=RESOURCE_EXHAUSTED"}}, 3600)
	// The driver now has room for fewer volumes; the node learns it only from the refusal.
	if err := os.WriteFile(countFile, []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pvc := e.pvc("data")
	pod := e.pod("app", kubecheck.ClaimVolume("data", pvc.Name))

	e.poll("the VolumeAttachment's attachError with code ResourceExhausted", func(ctx context.Context) (bool, error) {
		vas, err := e.cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, va := range vas.Items {
			if va.Spec.Attacher == e.name && va.Status.AttachError != nil && va.Status.AttachError.ErrorCode != nil {
				if c := codes.Code(*va.Status.AttachError.ErrorCode); c != codes.ResourceExhausted {
					t.Fatalf("VolumeAttachment %s: attachError code %s, want ResourceExhausted", va.Name, c)
				}
				return true, nil
			}
		}
		return false, nil
	})
	e.poll("allocatable count 2 right after the refused attach", e.allocatableCount(2))
	var last corev1.PodStatus
	e.poll("pod "+pod.Name+" rejected", func(ctx context.Context) (bool, error) {
		cur, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = cur.Status
		return cur.Status.Phase == corev1.PodFailed, nil
	})
	if last.Reason != "VolumeAttachmentLimitExceeded" || !strings.Contains(last.Message, "Node has reached its volume attachment limit") {
		t.Errorf("rejected pod: reason %q message %q, want VolumeAttachmentLimitExceeded and the kubelet's message", last.Reason, last.Message)
	}
	e.poll("Warning event VolumeAttachmentLimitExceeded", func(ctx context.Context) (bool, error) {
		evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name + ",reason=VolumeAttachmentLimitExceeded"})
		return err == nil && len(evs.Items) > 0 && evs.Items[0].Type == corev1.EventTypeWarning, nil
	})
	// Nothing of the volume was staged or published for the rejected pod.
	for _, c := range e.calls() {
		if (c.Method == "NodeStageVolume" || c.Method == "NodePublishVolume") && c.Code == "OK" {
			t.Errorf("%s succeeded for a volume whose attach was refused", c.Method)
		}
	}
}

// countEnv is an env whose driver reads its max_volumes_per_node (5 at first) from the
// file returned, and whose CSIDriver's nodeAllocatableUpdatePeriodSeconds is period; it
// returns once the CSINode has the count.
func countEnv(t *testing.T, o envOptions, period int64) (*env, string) {
	t.Helper()
	countFile := filepath.Join(t.TempDir(), "max-volumes")
	if err := os.WriteFile(countFile, []byte("5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.csiDriver = func(s *storagev1.CSIDriverSpec) { s.NodeAllocatableUpdatePeriodSeconds = ptr.To(period) }
	o.driverArgs = append(o.driverArgs, "--max-volumes-per-node-file", countFile)
	e := newEnv(t, o)
	e.waitRegistered()
	e.poll("allocatable count 5 at registration", e.allocatableCount(5))
	return e, countFile
}

// allocatableCount holds when the env's driver has allocatable count want in the CSINode.
func (e *env) allocatableCount(want int32) wait.ConditionWithContextFunc {
	return func(ctx context.Context) (bool, error) {
		cn, err := e.cs.StorageV1().CSINodes().Get(ctx, e.node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == e.name && d.Allocatable != nil && d.Allocatable.Count != nil && *d.Allocatable.Count == want {
				return true, nil
			}
		}
		return false, nil
	}
}
