package snapshotter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/kubecheck"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// Every sidecar works with exactly upstream's RBAC: the provisioner, attacher, resizer,
// csi-snapshotter and snapshot-controller run as five processes, each with a
// ServiceAccount bound to upstream's rule files alone (nothing of deploy/'s, no kubevol
// extra), beside the driver (attach required) and the node agent as its node. A claim is
// provisioned, attached and mounted by a pod that writes to it, expanded, modified to a
// read-only VolumeAttributesClass, snapshotted alone and in a VolumeGroupSnapshot, and
// restored from each into a new claim with the data; then everything is deleted. No
// component logs a refused request (the agent's Node authorizer lag aside), and nothing is
// left: no VolumeAttachment, PV, content, backend volume or snapshot, mount or loop device.
func TestLifecycleUnderUpstreamRBAC(t *testing.T) {
	e := newEnv(t, envOptions{agent: true, attach: true, resizer: true, upstreamRBAC: true})
	e.claim("src", "16Mi", nil)
	writer := e.podOn("writer", "src")
	dir := e.mountOf(writer)
	want := []byte("written under upstream's rules\n")
	if err := os.WriteFile(filepath.Join(dir, "data.txt"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	src := e.waitBound("src")
	pv := e.pvOf(src)
	va := csiplugin.AttachmentName(pv.Spec.CSI.VolumeHandle, e.driver, e.node)
	if a, err := e.cs.StorageV1().VolumeAttachments().Get(e.ctx, va, metav1.GetOptions{}); err != nil || !a.Status.Attached {
		t.Fatalf("VolumeAttachment %s of the mounted claim: %v, attached %v", va, err, a != nil && a.Status.Attached)
	}

	e.expand("src", "32Mi")

	// Modification by a claim edit, as with kubectl: the driver's readOnly parameter turns
	// the writer's live mount read-only; the claim and its PV name the class.
	ro := framework.AttributesClass(e.ctx, t, e.cs, strings.TrimSuffix(e.driver, ".kubevol.io")+"-ro", e.driver,
		map[string]string{driver.MutableReadOnly: "true"})
	framework.PatchClaimClass(e.ctx, t, e.cs, e.ns, "src", ro)
	if _, err := kubecheck.WaitForClaim(e.ctx, e.cs, e.ns, "src", 2*time.Minute, kubecheck.ModifiedTo(ro)); err != nil {
		t.Fatalf("claim src never modified to %s: %v; events:\n%s", ro, err, strings.Join(e.events("src"), "\n"))
	}
	if got := ptr.Deref(e.pvOf(src).Spec.VolumeAttributesClassName, ""); got != ro {
		t.Errorf("PV %s names class %q after the modification, want %q", pv.Name, got, ro)
	}
	if err := os.WriteFile(filepath.Join(dir, "after.txt"), want, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing through the mount after the readOnly class: %v, want EROFS", err)
	}

	e.snapshotOf("snap", "src", nil)
	vs := e.waitReady("snap")
	content := ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "")
	e.claim("restored", "32Mi", vs)
	got, err := os.ReadFile(filepath.Join(e.mountOf(e.podOn("reader", "restored")), "data.txt"))
	if err != nil || string(got) != string(want) {
		t.Fatalf("restored claim has %q (%v), want %q", got, err, want)
	}
	restored := e.pvOf(e.waitBound("restored"))

	// A group snapshot of the claim, from the driver's default group class: its member
	// restores the data too.
	e.groupClass(snapv1.VolumeSnapshotContentDelete)
	t.Cleanup(e.deleteAllGroups) // before the snapshots' cleanup: members go with their group
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(e.ctx, "src", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"group":"g"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	vgs := e.readyGroup("group", "g")
	member := e.waitReady(snapshotter.MemberSnapshotName(string(vgs.UID), pv.Spec.CSI.VolumeHandle))
	e.claim("from-group", "32Mi", member)
	got, err = os.ReadFile(filepath.Join(e.mountOf(e.podOn("group-reader", "from-group")), "data.txt"))
	if err != nil || string(got) != string(want) {
		t.Fatalf("claim restored from the group's member has %q (%v), want %q", got, err, want)
	}
	fromGroup := e.pvOf(e.waitBound("from-group"))
	e.deletePod("group-reader")
	e.deleteGroup("group")
	e.waitSnapshotGone(member.Name)

	e.deletePod("reader")
	e.deletePod("writer")
	if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSnapshotGone("snap")
	e.waitContentGone(content)
	for _, c := range []string{"src", "restored", "from-group"} {
		if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(e.ctx, c, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{pv.Name, restored.Name, fromGroup.Name} {
		e.waitGone("PV "+p, func(ctx context.Context) error {
			_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, p, metav1.GetOptions{})
			return err
		})
	}
	for _, h := range []string{pv.Spec.CSI.VolumeHandle, restored.Spec.CSI.VolumeHandle, fromGroup.Spec.CSI.VolumeHandle} {
		e.waitGone("VolumeAttachment of "+h, func(ctx context.Context) error {
			_, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, csiplugin.AttachmentName(h, e.driver, e.node), metav1.GetOptions{})
			return err
		})
	}

	if n := len(e.backendSnapshots()); n != 0 {
		t.Errorf("%d backend snapshots left", n)
	}
	if v := e.backendVolumes(); len(v) != 0 {
		t.Errorf("backend volumes left: %v", v)
	}
	left, err := drivertest.Leftovers(e.dir)
	if err != nil || len(left) != 0 {
		t.Errorf("left below %s: %v (%v)", e.dir, left, err)
	}
	if len(e.procs) != 7 {
		t.Errorf("%d processes, want the driver, the agent and five sidecars", len(e.procs))
	}
	// The agent runs as its node: the Node authorizer may refuse it an object of a pod just
	// bound, until its graph has the binding (the agent retries, as the kubelet does).
	framework.CheckNoForbidden(t, framework.NodeAuthorizerLag, e.procs...)
}

// expand asks for size and waits until the claim has it; the PV has it too.
func (e *env) expand(claim, size string) {
	e.t.Helper()
	last := framework.ExpandClaim(e.ctx, e.t, e.cs, e.ns, claim, size)
	if got, want := e.pvOf(last).Spec.Capacity[corev1.ResourceStorage], resource.MustParse(size); got.Cmp(want) < 0 {
		e.t.Errorf("PV capacity %s after the expansion, want %s", got.String(), size)
	}
}

// backendVolumes lists the driver's volumes by ID.
func (e *env) backendVolumes() []string {
	e.t.Helper()
	cctx, cancel := e.conn.WithTimeout(e.ctx)
	defer cancel()
	rsp, err := e.conn.Controller.ListVolumes(cctx, &csi.ListVolumesRequest{})
	if err != nil {
		e.t.Fatalf("ListVolumes: %v", err)
	}
	var out []string
	for _, en := range rsp.GetEntries() {
		out = append(out, en.GetVolume().GetVolumeId())
	}
	return out
}
