package resizer

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// A dir volume needs nothing from the node: the claim reaches its new size from the
// controller alone.
func TestExpandDirVolume(t *testing.T) {
	e := newEnv(t)
	class := e.class(map[string]string{"type": "dir"})
	_, pv := e.boundClaim("dir", class, "64Mi")

	e.resize("dir", "128Mi")
	want := resource.MustParse("128Mi")
	pvc := e.waitClaim("dir", "reached 128Mi", func(c *corev1.PersistentVolumeClaim) bool {
		q := storage(c.Status.Capacity)
		return q.Cmp(want) == 0
	})
	if s, ok := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; ok {
		t.Errorf("allocatedResourceStatuses[storage] = %q after a finished expansion, want none", s)
	}
	if q := storage(pvc.Status.AllocatedResources); q.Cmp(want) != 0 {
		t.Errorf("allocatedResources[storage] = %s, want %s", q.String(), want.String())
	}
	for _, c := range pvc.Status.Conditions {
		switch c.Type {
		case corev1.PersistentVolumeClaimResizing, corev1.PersistentVolumeClaimFileSystemResizePending,
			corev1.PersistentVolumeClaimControllerResizeError, corev1.PersistentVolumeClaimNodeResizeError:
			t.Errorf("condition %s left on a finished claim", c.Type)
		}
	}
	if q := storage(e.pv(pv.Name).Spec.Capacity); q.Cmp(want) != 0 {
		t.Errorf("PV capacity = %s, want %s", q.String(), want.String())
	}
	e.waitEvent("dir", "kubevol-resizer", "Resizing")
	e.waitEvent("dir", "kubevol-resizer", "VolumeResizeSuccessful")
	// kube-controller-manager's expander hands CSI claims to the external resizer.
	e.waitEvent("dir", "volume_expand", "ExternalExpanding")
	if got := e.calls("ControllerExpandVolume", pv.Spec.CSI.VolumeHandle); !slices.Contains(got, "ControllerExpandVolume:OK") {
		t.Errorf("driver calls on the volume: %v, want a successful ControllerExpandVolume", got)
	}
	// The CSI call is measured under upstream's metric and labels.
	body := e.get("/metrics")
	if !strings.Contains(body, `csi_sidecar_operations_seconds_count{driver_name="`+e.driver+`",grpc_status_code="OK",method_name="/csi.v1.Controller/ControllerExpandVolume"}`) {
		t.Errorf("/metrics lacks the ControllerExpandVolume series:\n%s", framework.GrepLines(body, "csi_sidecar_operations_seconds_count"))
	}
	if body := e.get("/healthz"); body != "ok" {
		t.Errorf("/healthz = %q", body)
	}
}

// A filesystem on a block image grows in two steps: the controller lengthens the image and
// leaves the filesystem to the node.
func TestExpandBlockVolumeNeedsNode(t *testing.T) {
	e := newEnv(t)
	class := e.class(map[string]string{"type": "block", "fsType": "xfs"})
	_, pv := e.boundClaim("xfs", class, "512Mi")

	e.resize("xfs", "1Gi")
	want := resource.MustParse("1Gi")
	pvc := e.waitClaim("xfs", "waiting for the node", func(c *corev1.PersistentVolumeClaim) bool {
		return c.Status.AllocatedResourceStatuses[corev1.ResourceStorage] == corev1.PersistentVolumeClaimNodeResizePending
	})
	var pending *corev1.PersistentVolumeClaimCondition
	for i, c := range pvc.Status.Conditions {
		if c.Type == corev1.PersistentVolumeClaimFileSystemResizePending {
			pending = &pvc.Status.Conditions[i]
		}
	}
	if pending == nil || pending.Status != corev1.ConditionTrue {
		t.Errorf("conditions = %+v, want FileSystemResizePending True", pvc.Status.Conditions)
	}
	if q := storage(pvc.Status.Capacity); q.Cmp(resource.MustParse("512Mi")) != 0 {
		t.Errorf("status.capacity = %s before the node expanded the filesystem, want 512Mi", q.String())
	}
	if q := storage(pvc.Status.AllocatedResources); q.Cmp(want) != 0 {
		t.Errorf("allocatedResources[storage] = %s, want %s", q.String(), want.String())
	}
	if q := storage(e.pv(pv.Name).Spec.Capacity); q.Cmp(want) != 0 {
		t.Errorf("PV capacity = %s, want %s", q.String(), want.String())
	}
	e.waitEvent("xfs", "kubevol-resizer", "FileSystemResizeRequired")
	if got := e.calls("ControllerExpandVolume", pv.Spec.CSI.VolumeHandle); !slices.Contains(got, "ControllerExpandVolume:OK") {
		t.Errorf("driver calls on the volume: %v, want a successful ControllerExpandVolume", got)
	}
}

func (e *env) get(path string) string {
	e.t.Helper()
	return framework.Get(e.t, "http://"+e.http+path)
}

// A driver that refuses to expand a volume in use answers FAILED_PRECONDITION; as upstream's
// --handle-volume-inuse-error, the resizer then holds back while a pod uses the claim (even
// one not yet scheduled), says so, and expands once the pod is gone.
func TestExpandRefusedWhileInUse(t *testing.T) {
	e := newEnv(t, "--fault", "ControllerExpandVolume:error=FAILED_PRECONDITION,count=1")
	class := e.class(map[string]string{"type": "dir"})
	_, pv := e.boundClaim("busy", class, "64Mi")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "user", Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubevol.io/none": "none"}, // never runs: it only uses the claim
			Containers:   []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "busy"}}}},
		},
	}
	if err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, nil // the ServiceAccount admission plugin waits for the default account
	}); err != nil {
		t.Fatal(err)
	}
	e.resize("busy", "128Mi")
	_, err := kubecheck.WaitForEvent(e.ctx, e.cs, e.ns, "busy", time.Minute, func(ev corev1.Event) bool {
		return ev.Reason == "VolumeResizeFailed" && strings.Contains(ev.Message, "in use by pod "+e.ns+"/user")
	})
	if err != nil {
		t.Fatalf("no event saying the claim waits for its pod; events:\n%s", strings.Join(e.events("busy"), "\n"))
	}
	if got := e.calls("ControllerExpandVolume", pv.Spec.CSI.VolumeHandle); !slices.Equal(got, []string{"ControllerExpandVolume:FailedPrecondition"}) {
		t.Fatalf("driver calls while the pod uses the claim: %v, want the one refused", got)
	}
	if err := e.cs.CoreV1().Pods(e.ns).Delete(e.ctx, "user", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	want := resource.MustParse("128Mi")
	e.waitClaim("busy", "reached 128Mi once the pod was gone", func(c *corev1.PersistentVolumeClaim) bool {
		q := storage(c.Status.Capacity)
		return q.Cmp(want) == 0
	})
}
