package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// TestGroupSnapshotAndRestore takes a VolumeGroupSnapshot of two mounted claims picked by a
// label, from the driver's default group class: the group, its content and one member
// VolumeSnapshot and content per claim become ready with upstream's names, finalizers and
// status; a member cannot be deleted alone; after both claims are overwritten, each member
// restores its claim's data as it was; deleting the group deletes the members, the contents
// and the backend group snapshot.
func TestGroupSnapshotAndRestore(t *testing.T) {
	metrics := framework.FreeAddr(t)
	e := newEnv(t, envOptions{agent: true, snapshotterArgs: []string{"--http-endpoint", metrics}})
	class := e.groupClass(snapv1.VolumeSnapshotContentDelete)
	t.Cleanup(e.deleteAllGroups) // before the snapshots' cleanup: members go with their group
	want := map[string]string{}
	dirs := map[string]string{}
	for _, name := range []string{"ga", "gb"} {
		pvc := framework.ClaimSpec(name, e.sc, "16Mi")
		pvc.Labels = map[string]string{"group": "g1"}
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		dirs[name] = e.mountOf(e.podOn("writer-"+name, name))
		want[name] = "claim " + name + " before the group snapshot\n"
		if err := os.WriteFile(filepath.Join(dirs[name], "data.txt"), []byte(want[name]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	volumes := map[string]string{} // volume handle -> claim
	for name := range want {
		volumes[e.pvOf(e.waitBound(name)).Spec.CSI.VolumeHandle] = name
	}

	vgs := e.readyGroup("group", "g1")
	contentName := snapshotter.GroupContentPrefix + string(vgs.UID)
	switch {
	case ptr.Deref(vgs.Spec.VolumeGroupSnapshotClassName, "") != class:
		t.Errorf("spec.volumeGroupSnapshotClassName = %q, want the default class %s", ptr.Deref(vgs.Spec.VolumeGroupSnapshotClassName, ""), class)
	case ptr.Deref(vgs.Status.BoundVolumeGroupSnapshotContentName, "") != contentName || vgs.Status.CreationTime == nil:
		t.Errorf("group status %+v", vgs.Status)
	case !snapshotter.HasFinalizer(vgs, snapshotter.FinalizerGroupBound):
		t.Errorf("group lacks its finalizer: %v", vgs.Finalizers)
	}
	content, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(e.ctx, contentName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	groupHandle := ptr.Deref(content.Status.VolumeGroupSnapshotHandle, "")
	switch {
	case !snapshotter.HasFinalizer(content, snapshotter.FinalizerGroupContentBound):
		t.Errorf("group content lacks its finalizer: %v", content.Finalizers)
	case groupHandle == "" || len(content.Status.VolumeSnapshotInfoList) != 2 || len(content.Spec.Source.VolumeHandles) != 2:
		t.Fatalf("group content %+v %+v", content.Spec, content.Status)
	case content.Annotations[snapshotter.AnnGroupBeingCreated] != "":
		t.Errorf("group content still has %s", snapshotter.AnnGroupBeingCreated)
	}
	backend := e.backendSnapshots()
	members := map[string]*snapv1.VolumeSnapshot{} // claim -> member
	var created time.Time
	for _, info := range content.Status.VolumeSnapshotInfoList {
		claim := volumes[info.VolumeHandle]
		vs := e.waitReady(snapshotter.MemberSnapshotName(string(vgs.UID), info.VolumeHandle))
		members[claim] = vs
		vsc := e.content(snapshotter.MemberContentName(string(vgs.UID), info.VolumeHandle))
		switch {
		case snapshotter.GroupOwner(vs) != "group" || !snapshotter.HasFinalizer(vs, snapshotter.FinalizerSnapshotInGroup):
			t.Errorf("member %s: owners %v finalizers %v", vs.Name, vs.OwnerReferences, vs.Finalizers)
		case ptr.Deref(vs.Status.VolumeGroupSnapshotName, "") != "group" || ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "") != claim:
			t.Errorf("member %s: spec %+v status %+v", vs.Name, vs.Spec, vs.Status)
		case vsc.Annotations[snapshotter.AnnGroupSnapshotHandle] != groupHandle || ptr.Deref(vsc.Status.SnapshotHandle, "") != info.SnapshotHandle:
			t.Errorf("member content %s: annotations %v status %+v", vsc.Name, vsc.Annotations, vsc.Status)
		case backend[info.SnapshotHandle].GetGroupSnapshotId() != groupHandle:
			t.Errorf("backend snapshot %s: %v, want a member of %s", info.SnapshotHandle, backend[info.SnapshotHandle], groupHandle)
		}
		// One point in time for all members.
		if at := time.Unix(0, *info.CreationTime); created.IsZero() {
			created = at
		} else if !at.Equal(created) {
			t.Errorf("members taken at %v and %v", created, at)
		}
	}
	if len(members) != 2 {
		t.Fatalf("members %v, want one per claim", members)
	}

	for name, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "data.txt"), []byte("overwritten after the group snapshot\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		restored := "restored-" + name
		e.claim(restored, "16Mi", members[name])
		got, err := os.ReadFile(filepath.Join(e.mountOf(e.podOn("reader-"+name, restored)), "data.txt"))
		if err != nil || string(got) != want[name] {
			t.Fatalf("claim restored from the member of %s has %q (%v), want %q", name, got, err, want[name])
		}
	}

	// A member goes only with its group.
	if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, members["ga"].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent(e.ns, members["ga"].Name, "SnapshotDeletePending", "belongs to group snapshot")

	e.deleteGroup("group")
	e.waitGone("VolumeGroupSnapshotContent "+contentName, func(ctx context.Context) error {
		_, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, contentName, metav1.GetOptions{})
		return err
	})
	for _, info := range content.Status.VolumeSnapshotInfoList {
		e.waitSnapshotGone(snapshotter.MemberSnapshotName(string(vgs.UID), info.VolumeHandle))
		e.waitContentGone(snapshotter.MemberContentName(string(vgs.UID), info.VolumeHandle))
	}
	if n := len(e.backendSnapshots()); n != 0 {
		t.Errorf("%d backend snapshots left after the group's deletion", n)
	}
	// The group's three operations, under upstream's names and labels, once each.
	body := scrape(t, metrics)
	for _, op := range []string{"CreateGroupSnapshot", "CreateGroupSnapshotAndReady", "DeleteGroupSnapshot"} {
		series := `snapshot_controller_operation_total_seconds_count{driver_name="` + e.driver + `",operation_name="` + op +
			`",operation_status="success",snapshot_type="dynamic"} 1`
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	if strings.Contains(body, `operation_status="cancel"`) {
		t.Errorf("/metrics records a cancelled operation of a group that was ready:\n%s", framework.GrepLines(body, "operation_status=\"cancel\""))
	}
}

// groupClass creates the driver's default VolumeGroupSnapshotClass (deleted at the end).
func (e *env) groupClass(policy snapv1.DeletionPolicy) string {
	e.t.Helper()
	class := &groupv1.VolumeGroupSnapshotClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "vgsclass-",
		Annotations: map[string]string{snapshotter.AnnGroupDefaultClass: "true"}}, Driver: e.driver, DeletionPolicy: policy}
	out, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().Create(e.ctx, class, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().Delete(context.Background(), out.Name, metav1.DeleteOptions{})
	})
	return out.Name
}

// readyGroup creates the VolumeGroupSnapshot name of the claims labelled group=label, from
// the default group class, and waits until it is ready.
func (e *env) readyGroup(name, label string) *groupv1.VolumeGroupSnapshot {
	e.t.Helper()
	vgs := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: groupv1.VolumeGroupSnapshotSpec{Source: groupv1.VolumeGroupSnapshotSource{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": label}}}}}
	if _, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).Create(e.ctx, vgs, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return e.waitGroup(name, "ready", func(g *groupv1.VolumeGroupSnapshot) bool {
		return g.Status != nil && ptr.Deref(g.Status.ReadyToUse, false)
	})
}

// deleteGroup deletes the VolumeGroupSnapshot and waits until it is gone.
func (e *env) deleteGroup(name string) {
	e.t.Helper()
	if err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitGone("VolumeGroupSnapshot "+name, func(ctx context.Context) error {
		_, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
}

func (e *env) waitGroup(name, what string, cond func(*groupv1.VolumeGroupSnapshot) bool) *groupv1.VolumeGroupSnapshot {
	e.t.Helper()
	var last *groupv1.VolumeGroupSnapshot
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		g, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = g
		return cond(g), nil
	})
	if err != nil {
		e.t.Fatalf("group snapshot %s never %s: %v; last: %+v; events:\n%s", name, what, err, last, strings.Join(e.events(name), "\n"))
	}
	return last
}

// deleteAllGroups deletes the test's group snapshots and waits until they are gone, with the
// snapshotter still running; then the group contents of the driver that outlive them.
func (e *env) deleteAllGroups() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	groups := e.snap.GroupsnapshotV1()
	_ = groups.VolumeGroupSnapshots(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		l, err := groups.VolumeGroupSnapshots(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil && !e.t.Failed() {
		e.t.Errorf("group snapshots of %s not deleted at the end: %v", e.ns, err)
	}
	all, _ := groups.VolumeGroupSnapshotContents().List(ctx, metav1.ListOptions{})
	for _, c := range all.Items {
		if c.Spec.Driver == e.driver {
			_ = groups.VolumeGroupSnapshotContents().Delete(ctx, c.Name, metav1.DeleteOptions{})
		}
	}
}
