package kubecheck

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestWaitBoundReturnsThePV(t *testing.T) {
	ctx := context.Background()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	cs := fake.NewClientset(pv, pvc)
	got, err := WaitBound(ctx, cs, "ns", "data", time.Second)
	if err != nil || got.Name != "pv-1" {
		t.Fatalf("WaitBound = %v, %v; want pv-1", got, err)
	}
	pending := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: "ns"},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	if _, err := cs.CoreV1().PersistentVolumeClaims("ns").Create(ctx, pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := WaitBound(ctx, cs, "ns", "later", 300*time.Millisecond); err == nil {
		t.Fatal("WaitBound of a pending claim succeeded")
	}
}

// A claim counts as expanded once its capacity reached the size and nothing of the resize
// is left; as modified once its current class is the class and nothing of the modification
// is left.
func TestClaimStates(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{Status: corev1.PersistentVolumeClaimStatus{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Mi")}}}
	if !Expanded("32Mi")(pvc) || Expanded("64Mi")(pvc) {
		t.Errorf("Expanded: 32Mi capacity is expanded to 32Mi, not to 64Mi")
	}
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue}}
	if Expanded("32Mi")(pvc) {
		t.Errorf("Expanded with a resize condition left")
	}
	pvc.Status.Conditions = nil
	pvc.Status.CurrentVolumeAttributesClassName = ptr.To("gold")
	if !ModifiedTo("gold")(pvc) || ModifiedTo("silver")(pvc) {
		t.Errorf("ModifiedTo: current class gold")
	}
	pvc.Status.ModifyVolumeStatus = &corev1.ModifyVolumeStatus{TargetVolumeAttributesClassName: "silver", Status: corev1.PersistentVolumeClaimModifyVolumeInProgress}
	if ModifiedTo("gold")(pvc) {
		t.Errorf("ModifiedTo with a modification in progress")
	}
	if got, want := Modification(pvc), `modification to "silver" InProgress`; got != want {
		t.Errorf("Modification = %q, want %q", got, want)
	}
}

func TestWaitForEventListsWhatItSaw(t *testing.T) {
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "ns"},
		InvolvedObject: corev1.ObjectReference{Name: "pod"}, Reason: "FailedMount", Message: "configmap \"late\" not found"}
	cs := fake.NewClientset(ev)
	got, err := WaitForEvent(context.Background(), cs, "ns", "pod", time.Second, EventWith("FailedMount", "not found"))
	if err != nil || got.Name != "e1" {
		t.Fatalf("WaitForEvent = %v, %v", got.Name, err)
	}
	_, err = WaitForEvent(context.Background(), cs, "ns", "pod", 300*time.Millisecond, EventWith("FailedMount", "is not a directory"))
	if err == nil {
		t.Fatal("WaitForEvent matched an event it should not")
	}
}

func TestVolumesUp(t *testing.T) {
	p := &corev1.Pod{}
	if VolumesUp(p) || VolumesReadyTrue(p) {
		t.Error("a pod without conditions has its volumes up")
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue}}
	if !VolumesUp(p) || VolumesReadyTrue(p) {
		t.Error("PodReadyToStartContainers: volumes up on a kubelet, but not the node agent's word")
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: VolumesReady, Status: corev1.ConditionTrue}}
	if !VolumesUp(p) || !VolumesReadyTrue(p) {
		t.Error("VolumesReady True: volumes up")
	}
}

func TestMountsUnderNothingBelowAFreshDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if m := MountsUnder(dir); len(m) != 0 {
		t.Errorf("MountsUnder(%s) = %v", dir, m)
	}
	if got := MountsUnder(""); len(got) == 0 {
		t.Error("MountsUnder(\"\") lists no mount below /")
	}
}
