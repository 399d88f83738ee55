package podstatus_test

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubevol/kubevol/pkg/podstatus"
)

// A Writer is the volume manager's Observer (volumemanager.Config.Observer); here it is
// called directly, as the manager would when a pod's volumes are mounted.
func ExampleWriter() {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", UID: "0b5c8a2e"}}
	client := fake.NewClientset(pod)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := podstatus.New(client)
	go w.Run(ctx)

	w.VolumesReady(pod)
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, _ := client.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{})
		if len(p.Status.Conditions) == 0 {
			return false, nil
		}
		c := p.Status.Conditions[0]
		fmt.Println(c.Type, c.Status, c.Reason)
		return true, nil
	})
	// Output: kubevol.io/VolumesReady True VolumesMounted
}
