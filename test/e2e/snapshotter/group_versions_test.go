package snapshotter

import (
	"context"
	"testing"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// TestGroupSnapshotOfEveryServedVersion: a backup tool written against v1beta1 or v1beta2
// of groupsnapshot.storage.k8s.io (external-snapshotter v8.0 to v8.5) creates its
// VolumeGroupSnapshot in that version; kubevol's controller, which works in v1, takes it
// through to ready, and the tool reads it back, in its own version, ready to use and bound
// to its content, whose members are the claims it selected.
func TestGroupSnapshotOfEveryServedVersion(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.groupClass(snapv1.VolumeSnapshotContentDelete)
	t.Cleanup(e.deleteAllGroups) // before the snapshots' cleanup: members go with their group
	dyn, err := dynamic.NewForConfig(framework.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1beta1", "v1beta2"} {
		t.Run(v, func(t *testing.T) {
			pvc := framework.ClaimSpec("claim-"+v, e.sc, "16Mi")
			pvc.Labels = map[string]string{"group": v}
			if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, pvc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			handle := e.pvOf(e.waitBound(pvc.Name)).Spec.CSI.VolumeHandle
			res := dyn.Resource(schema.GroupVersionResource{Group: "groupsnapshot.storage.k8s.io", Version: v, Resource: "volumegroupsnapshots"}).Namespace(e.ns)
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "groupsnapshot.storage.k8s.io/" + v, "kind": "VolumeGroupSnapshot",
				"metadata": map[string]any{"name": "group-" + v},
				"spec":     map[string]any{"source": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"group": v}}}},
			}}
			if _, err := res.Create(e.ctx, obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create a VolumeGroupSnapshot as %s: %v", v, err)
			}
			var last *unstructured.Unstructured
			err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				u, err := res.Get(ctx, "group-"+v, metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				last = u
				ready, _, _ := unstructured.NestedBool(u.Object, "status", "readyToUse")
				return ready, nil
			})
			if err != nil {
				t.Fatalf("the VolumeGroupSnapshot created as %s, read as %s, never ready: %v; last: %v", v, v, err, last)
			}
			if got := last.GetAPIVersion(); got != "groupsnapshot.storage.k8s.io/"+v {
				t.Errorf("read back as %s", got)
			}
			content, _, _ := unstructured.NestedString(last.Object, "status", "boundVolumeGroupSnapshotContentName")
			if want := snapshotter.GroupContentPrefix + string(last.GetUID()); content != want {
				t.Errorf("status.boundVolumeGroupSnapshotContentName = %q, want %q", content, want)
			}
			member := e.waitReady(snapshotter.MemberSnapshotName(string(last.GetUID()), handle))
			if got := ptr.Deref(member.Spec.Source.PersistentVolumeClaimName, ""); got != pvc.Name {
				t.Errorf("member %s is of claim %q, want %s", member.Name, got, pvc.Name)
			}
			if err := res.Delete(e.ctx, "group-"+v, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			e.waitGone("VolumeGroupSnapshot group-"+v, func(ctx context.Context) error {
				_, err := res.Get(ctx, "group-"+v, metav1.GetOptions{})
				return err
			})
			e.waitSnapshotGone(member.Name)
			e.waitGone("VolumeGroupSnapshotContent "+content, func(ctx context.Context) error {
				_, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, content, metav1.GetOptions{})
				return err
			})
		})
	}
	if n := len(e.backendSnapshots()); n != 0 {
		t.Errorf("%d backend snapshots left after the groups' deletion", n)
	}
}
