package volumemanager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

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

// expandPlugin is a plugin of NFS persistent volumes whose NodeExpand answers err.
type expandPlugin struct {
	*seLinuxPVPlugin
	err error
}

func (p *expandPlugin) NodeExpand(context.Context, *volume.Spec, types.UID, resource.Quantity) error {
	return p.err
}

// expandManager is a manager whose volume "data" (PV pv1, claim c) grew from 1Gi to 2Gi
// and waits for the node; NodeExpand answers nodeErr.
func expandManager(t *testing.T, nodeErr error, block bool) (*Manager, *record.FakeRecorder, *v1.Pod, DesiredVolume) {
	t.Helper()
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{
		Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")},
		PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "x", Path: "/vol1"}}}}
	if block {
		mode := v1.PersistentVolumeBlock
		pv.Spec.VolumeMode = &mode
	}
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "claim-uid"},
		Status: v1.PersistentVolumeClaimStatus{Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AllocatedResourceStatuses: map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}}}
	client := fake.NewClientset(pvc)
	rec := record.NewFakeRecorder(10)
	m, err := New(Config{Client: client, NodeName: "node1", Paths: volume.Paths{Root: t.TempDir()}, Recorder: rec,
		Plugins: []volume.Plugin{&expandPlugin{seLinuxPVPlugin: &seLinuxPVPlugin{sharedPlugin: &sharedPlugin{}}, err: nodeErr}}})
	if err != nil {
		t.Fatal(err)
	}
	dv := DesiredVolume{Name: "test/shared//vol1", PluginName: "test/shared", Spec: volume.SpecFromPersistentVolume(pv, false),
		OuterNames: []string{"data"}, Claim: pvc}
	m.asw.markAttached(AttachedVolume{Name: dv.Name, PluginName: dv.PluginName, Spec: dv.Spec})
	return m, rec, pod("p", "uid-p"), dv
}

func nextEvent(t *testing.T, rec *record.FakeRecorder) string {
	t.Helper()
	select {
	case e := <-rec.Events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
		return ""
	}
}

func claimResizeStatus(t *testing.T, m *Manager) v1.ClaimResourceStatus {
	t.Helper()
	c, err := m.cfg.Client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Status.AllocatedResourceStatuses[v1.ResourceStorage]
}

// The expansion of a mounted volume fails with upstream's ExpandInUseVolume text and a
// VolumeResizeFailed event on the pod; it succeeds with the node expander's text on the pod
// and the claim.
func TestExpandInUseTexts(t *testing.T) {
	ctx := context.Background()
	m, rec, p, dv := expandManager(t, status.Error(codes.Internal, "boom"), false)
	m.startExpand(ctx, p, dv, resource.MustParse("2Gi"))
	want := `Warning VolumeResizeFailed NodeExpandVolume.NodeExpandVolume failed for volume "pv1" : rpc error: code = Internal desc = boom`
	if e := nextEvent(t, rec); e != want {
		t.Errorf("failure event %q, want %q", e, want)
	}
	m.exec.Wait()
	if st := claimResizeStatus(t, m); st != v1.PersistentVolumeClaimNodeResizeInProgress {
		t.Errorf("claim resize status after an Internal error: %s", st)
	}

	m, rec, p, dv = expandManager(t, nil, false)
	m.startExpand(ctx, p, dv, resource.MustParse("2Gi"))
	want = `Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv1" node1`
	for _, what := range []string{"pod", "claim"} {
		if e := nextEvent(t, rec); e != want {
			t.Errorf("%s's success event %q, want %q", what, e, want)
		}
	}
}

// An expansion the mount finishes fails the mount, uncertain, with the mount's text (the
// map's for a block volume); refused while in use (FAILED_PRECONDITION), it lets the mount
// through and is not retried online.
func TestExpandDuringMountTexts(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		block bool
		want  string
	}{
		{false, `MountVolume.Setup failed while expanding volume for volume "pv1" : rpc error: code = Internal desc = boom`},
		{true, `MapVolume.MarkVolumeAsMounted failed while expanding volume for volume "pv1" : rpc error: code = Internal desc = boom`},
	} {
		m, _, p, dv := expandManager(t, status.Error(codes.Internal, "boom"), tc.block)
		err := m.expandDuringMount(ctx, p, dv)
		if err == nil || err.Error() != tc.want || !volume.IsUncertain(err) {
			t.Errorf("block %v: %v (uncertain %v), want uncertain %q", tc.block, err, volume.IsUncertain(err), tc.want)
		}
	}

	m, _, p, dv := expandManager(t, status.Error(codes.FailedPrecondition, "in use"), false)
	if err := m.expandDuringMount(ctx, p, dv); err != nil {
		t.Errorf("FailedPrecondition failed the mount: %v", err)
	}
	if m.asw.expandableOnline(dv.Name) {
		t.Error("a volume refused as in use is still expanded online")
	}
	if st := claimResizeStatus(t, m); st != v1.PersistentVolumeClaimNodeResizeInProgress {
		t.Errorf("claim resize status after FailedPrecondition: %s, want NodeResizeInProgress (not infeasible)", st)
	}
}

// InvalidArgument, OutOfRange and NotFound are infeasible (upstream's CSI expander); the
// in-use FailedPrecondition and the rest are not.
func TestInfeasibleExpansionCodes(t *testing.T) {
	for c, want := range map[codes.Code]bool{
		codes.InvalidArgument: true, codes.OutOfRange: true, codes.NotFound: true,
		codes.FailedPrecondition: false, codes.Internal: false, codes.ResourceExhausted: false,
	} {
		if got := infeasible(fmt.Errorf("wrapped: %w", status.Error(c, "x"))); got != want {
			t.Errorf("%s: infeasible %v, want %v", c, got, want)
		}
	}
	m, _, p, dv := expandManager(t, status.Error(codes.NotFound, "gone"), false)
	_ = m.expandDuringMount(context.Background(), p, dv)
	if st := claimResizeStatus(t, m); st != v1.PersistentVolumeClaimNodeResizeInfeasible {
		t.Errorf("claim resize status after NotFound: %s, want NodeResizeInfeasible", st)
	}
}
