package volumemanager

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubevol/kubevol/pkg/volume"
)

func expandable(pvSize, claimSize string, st v1.ClaimResourceStatus) DesiredVolume {
	pv := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse(pvSize)}}}
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "claim-uid"},
		Status: v1.PersistentVolumeClaimStatus{Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse(claimSize)}}}
	if st != "" {
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: st}
	}
	return DesiredVolume{Spec: volume.SpecFromPersistentVolume(pv, false), Claim: pvc}
}

func legacyPending() DesiredVolume {
	dv := expandable("2Gi", "1Gi", "")
	dv.Claim.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue}}
	return dv
}

// The node expands only once the controller is done, and not twice for one size.
func TestExpansionTarget(t *testing.T) {
	done := resource.MustParse("2Gi")
	for _, tc := range []struct {
		name string
		dv   DesiredVolume
		av   AttachedVolume
		want bool
	}{
		{"pending", expandable("2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizePending), AttachedVolume{}, true},
		{"no status (pre-recovery resizer), FileSystemResizePending", legacyPending(), AttachedVolume{}, true},
		{"PV grown, claim status not written yet", expandable("2Gi", "1Gi", ""), AttachedVolume{}, false},
		{"retry in progress", expandable("2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizeInProgress), AttachedVolume{}, true},
		{"already expanded by us", expandable("2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizePending), AttachedVolume{ExpandedTo: &done}, false},
		{"claim already at size", expandable("2Gi", "2Gi", ""), AttachedVolume{}, false},
		{"controller still expanding", expandable("2Gi", "1Gi", v1.PersistentVolumeClaimControllerResizeInProgress), AttachedVolume{}, false},
		{"infeasible on the node", expandable("2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizeInfeasible), AttachedVolume{}, false},
		{"read-only or inline (no claim)", DesiredVolume{Spec: expandable("2Gi", "1Gi", "").Spec}, AttachedVolume{}, false},
	} {
		size, ok := expansionTarget(tc.dv, tc.av)
		if ok != tc.want || (ok && size.Cmp(done) != 0) {
			t.Errorf("%s: expansionTarget = %s, %v; want 2Gi, %v", tc.name, size.String(), ok, tc.want)
		}
	}
}

// Finishing the expansion sets the claim's capacity and clears exactly the resize
// conditions and status, keeping anything else in the status.
func TestFinishClaimResize(t *testing.T) {
	dv := expandable("2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizeInProgress)
	pvc := dv.Claim.DeepCopy()
	pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{
		{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue},
		{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue},
		{Type: "Other", Status: v1.ConditionTrue},
	}
	client := fake.NewClientset(pvc)
	m := &Manager{cfg: Config{Client: client}, claims: newClaims()}
	if err := m.finishClaimResize(context.Background(), dv.Claim, resource.MustParse("2Gi")); err != nil {
		t.Fatal(err)
	}
	got, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
	if c := got.Status.Capacity[v1.ResourceStorage]; c.String() != "2Gi" {
		t.Errorf("capacity = %s, want 2Gi", c.String())
	}
	if len(got.Status.AllocatedResourceStatuses) != 0 {
		t.Errorf("allocatedResourceStatuses = %v, want none", got.Status.AllocatedResourceStatuses)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != "Other" {
		t.Errorf("conditions = %v, want only Other", got.Status.Conditions)
	}
}

// The decision is made on the informer cache; the claim read before the expansion must
// agree, or the node waits.
func TestBeginNodeResizeChecksTheCurrentClaim(t *testing.T) {
	cached := expandable("2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizePending)
	for _, tc := range []struct {
		name    string
		current v1.ClaimResourceStatus
		ok      bool
	}{
		{"still pending", v1.PersistentVolumeClaimNodeResizePending, true},
		{"controller expanding again", v1.PersistentVolumeClaimControllerResizeInProgress, false},
	} {
		cur := cached.Claim.DeepCopy()
		cur.Status.AllocatedResourceStatuses[v1.ResourceStorage] = tc.current
		client := fake.NewClientset(cur)
		m := &Manager{cfg: Config{Client: client}, claims: newClaims()}
		err := m.beginNodeResize(context.Background(), cached.Claim, resource.MustParse("2Gi"))
		if (err == nil) != tc.ok {
			t.Errorf("%s: beginNodeResize = %v, want ok=%v", tc.name, err, tc.ok)
		}
		got, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
		want := tc.current
		if tc.ok {
			want = v1.PersistentVolumeClaimNodeResizeInProgress
		}
		if st := got.Status.AllocatedResourceStatuses[v1.ResourceStorage]; st != want {
			t.Errorf("%s: resize status = %s, want %s", tc.name, st, want)
		}
	}
}
