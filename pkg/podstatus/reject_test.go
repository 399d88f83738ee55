package podstatus

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

// A rejected pod gets the kubelet's rejection status: phase Failed, the reason, and the
// message prefixed "Pod was rejected: ".
func TestRejectPod(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Status: v1.PodStatus{Phase: v1.PodPending}}
	client := fake.NewClientset(pod)
	w := New(client)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	w.RejectPod(pod, "VolumeAttachmentLimitExceeded", "Node has reached its volume attachment limit")
	var p *v1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
		return err == nil && p.Status.Phase == v1.PodFailed && p.Status.Reason == "VolumeAttachmentLimitExceeded" &&
			p.Status.Message == "Pod was rejected: Node has reached its volume attachment limit", nil
	}); err != nil {
		t.Fatalf("pod status %+v, want Failed VolumeAttachmentLimitExceeded", p.Status)
	}
}
