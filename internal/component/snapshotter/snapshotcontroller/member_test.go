package snapshotcontroller

import (
	"testing"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/snaptest"
)

// A member VolumeSnapshot being deleted waits for its group (upstream's
// SnapshotDeletePending) only while that very group exists: a group made later under the
// same name, with another UID, does not hold the old group's member.
func TestMemberDeletionWaitsForItsOwnGroupOnly(t *testing.T) {
	for _, tc := range []struct {
		name     string
		groupUID types.UID
		held     bool
	}{
		{"its group", "uid-g", true},
		{"a new group of the same name", "uid-g2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs, content := boundPair()
			now := metav1.Now()
			vs.DeletionTimestamp = &now
			vs.OwnerReferences = []metav1.OwnerReference{{APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot", Name: "g", UID: "uid-g"}}
			groupName := "g"
			vs.Status.VolumeGroupSnapshotName = &groupName
			group := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns, UID: tc.groupUID}}
			f := start(t, source(), class("gold", snapv1.VolumeSnapshotContentDelete, true), vs, content, group)
			rec := f.events()
			f.steps("s", 3)
			held := snaptest.SawEvent(rec, "SnapshotDeletePending")
			if held != tc.held {
				t.Errorf("SnapshotDeletePending event: %v, want %v", held, tc.held)
			}
			if got := f.vs("s"); tc.held && (got == nil || !snapshotter.HasFinalizer(got, snapshotter.FinalizerSnapshotBound)) {
				t.Errorf("a member of an existing group released: %+v", got)
			}
			if !tc.held {
				f.syncUntil("s", "deleted the content", func() bool {
					return f.vsc(content.Name) == nil || f.vsc(content.Name).Annotations[snapshotter.AnnBeingDeleted] == "yes"
				})
			}
		})
	}
}
