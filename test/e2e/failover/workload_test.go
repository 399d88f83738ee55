package failover

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/resizer"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// step is how long one step of a loop may wait: a takeover under upstream's timing (up to
// 15 s + 4.4 × 5 s) and a retry backoff, with room for a loaded machine.
const step = 3 * time.Minute

// workload runs loops that keep every role busy, each loop on its own objects, until stop:
// whichever role's leader dies, some loop waits on it.
type workload struct {
	e    *env
	stop chan struct{}
	wg   sync.WaitGroup
	// done counts the finished iterations of each loop kind.
	done map[string]*atomic.Int64
}

func newWorkload(e *env) *workload {
	w := &workload{e: e, stop: make(chan struct{}), done: map[string]*atomic.Int64{}}
	for _, k := range []string{"claim", "attach", "expand+modify", "snapshot", "group"} {
		w.done[k] = &atomic.Int64{}
	}
	return w
}

// loop runs iter(0), iter(1), ... until stop; an error ends the loop and fails the test.
func (w *workload) loop(kind string, n int, iter func(i int) error) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			if err := iter(i); err != nil {
				w.e.t.Errorf("%s loop %d, iteration %d: %v", kind, n, i, err)
				return
			}
			w.done[kind].Add(1)
		}
	}()
}

// end stops the loops after their current iteration and waits for them.
func (w *workload) end() {
	close(w.stop)
	w.wg.Wait()
}

// claim creates a claim of the env's class, labelled. It names no VolumeAttributesClass:
// upstream's provisioner RBAC, which deploy/ ships, grants no get on them.
func (e *env) claim(name string, labels map[string]string) error {
	pvc := framework.ClaimSpec(name, e.sc, "1Mi")
	pvc.Labels = labels
	_, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, pvc, metav1.CreateOptions{})
	return err
}

// bound waits until the claim is bound and returns its PV's name.
func (e *env) bound(name string) (string, error) {
	pv := ""
	err := e.poll("claim "+name+" bound", step, func(ctx context.Context) (bool, error) {
		c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pv = c.Spec.VolumeName
		return c.Status.Phase == corev1.ClaimBound, nil
	})
	return pv, err
}

// deleteClaim deletes the claim and waits until its PV, and so its volume, is gone.
func (e *env) deleteClaim(name, pv string) error {
	if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return e.poll("PV "+pv+" of "+name+" deleted", step, gone(func(ctx context.Context) error {
		_, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
		return err
	}))
}

// claimLoop provisions and deletes claims: the provisioner's CreateVolume and DeleteVolume.
func (e *env) claimLoop(n int) func(int) error {
	return func(i int) error {
		name := fmt.Sprintf("c%d-%d", n, i)
		if err := e.claim(name, nil); err != nil {
			return err
		}
		pv, err := e.bound(name)
		if err != nil {
			return err
		}
		return e.deleteClaim(name, pv)
	}
}

// attachLoop attaches pv and detaches it, as the attach/detach controller asks the
// attacher to: ControllerPublishVolume and ControllerUnpublishVolume.
func (e *env) attachLoop(pv string) func(int) error {
	return func(i int) error {
		name := fmt.Sprintf("%s-%s-%d", e.ns, pv, i)
		if err := e.attach(name, pv); err != nil {
			return err
		}
		return e.detach(name)
	}
}

// attach writes the VolumeAttachment name of pv to the env's node and waits until it is
// attached.
func (e *env) attach(name, pv string) error {
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: e.driver, NodeName: e.node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}}
	if _, err := e.cs.StorageV1().VolumeAttachments().Create(e.ctx, va, metav1.CreateOptions{}); err != nil {
		return err
	}
	return e.poll("VolumeAttachment "+name+" attached", step, func(ctx context.Context) (bool, error) {
		va, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		return err == nil && va.Status.Attached, nil
	})
}

// detach deletes the VolumeAttachment and waits until it is gone.
func (e *env) detach(name string) error {
	if err := e.cs.StorageV1().VolumeAttachments().Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return e.poll("VolumeAttachment "+name+" detached", step, gone(func(ctx context.Context) error {
		_, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		return err
	}))
}

// resizeLoop grows the claim by 1Mi, then moves it to the next attributes class: the
// resizer's ControllerExpandVolume and ControllerModifyVolume.
func (e *env) resizeLoop(claim string) func(int) error {
	return func(i int) error {
		size := resource.MustParse(fmt.Sprintf("%dMi", i+2))
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]string{"storage": size.String()}}}})
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(e.ctx, claim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		var last *corev1.PersistentVolumeClaim
		err := e.poll("claim "+claim+" expanded to "+size.String(), step, func(ctx context.Context) (bool, error) {
			c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, claim, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = c
			if resizer.Resizing(c) || len(c.Status.AllocatedResourceStatuses) > 0 {
				return false, nil
			}
			got := c.Status.Capacity[corev1.ResourceStorage]
			return got.Cmp(size) >= 0, nil
		})
		if err != nil {
			return fmt.Errorf("%w; last status %s", err, statusOf(last))
		}
		class := e.vacs[i%2]
		patch = []byte(`{"spec":{"volumeAttributesClassName":"` + class + `"}}`)
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(e.ctx, claim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		modified := kubecheck.ModifiedTo(class)
		err = e.poll("claim "+claim+" modified to "+class, step, func(ctx context.Context) (bool, error) {
			c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, claim, metav1.GetOptions{})
			if err == nil {
				last = c
			}
			return err == nil && modified(c), nil
		})
		if err != nil {
			return fmt.Errorf("%w; last status %s", err, statusOf(last))
		}
		return nil
	}
}

// statusOf is the claim's status as JSON, for an error.
func statusOf(c *corev1.PersistentVolumeClaim) string {
	if c == nil {
		return "(never read)"
	}
	raw, _ := json.Marshal(c.Status)
	return string(raw)
}

// snapshotLoop takes a snapshot of the claim and deletes it: the snapshot-controller's
// contents and the csi-snapshotter's CreateSnapshot and DeleteSnapshot.
func (e *env) snapshotLoop(claim string) func(int) error {
	return func(i int) error {
		name := fmt.Sprintf("%s-%d", claim, i)
		vs := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim}}}
		if _, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Create(e.ctx, vs, metav1.CreateOptions{}); err != nil {
			return err
		}
		err := e.poll("snapshot "+name+" ready", step, func(ctx context.Context) (bool, error) {
			vs, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false), nil
		})
		if err != nil {
			return err
		}
		if err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		return e.poll("snapshot "+name+" deleted", step, gone(func(ctx context.Context) error {
			_, err := e.snap.SnapshotV1().VolumeSnapshots(e.ns).Get(ctx, name, metav1.GetOptions{})
			return err
		}))
	}
}

// groupLoop takes a group snapshot of the claims labelled group=label and deletes it: the
// group halves of both snapshot roles.
func (e *env) groupLoop(label string) func(int) error {
	return func(i int) error {
		name := fmt.Sprintf("%s-%d", label, i)
		vgs := &groupv1.VolumeGroupSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: groupv1.VolumeGroupSnapshotSpec{Source: groupv1.VolumeGroupSnapshotSource{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": label}}}}}
		if _, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).Create(e.ctx, vgs, metav1.CreateOptions{}); err != nil {
			return err
		}
		err := e.poll("group snapshot "+name+" ready", step, func(ctx context.Context) (bool, error) {
			g, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && g.Status != nil && ptr.Deref(g.Status.ReadyToUse, false), nil
		})
		if err != nil {
			return err
		}
		if err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		return e.poll("group snapshot "+name+" deleted", step, gone(func(ctx context.Context) error {
			_, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(e.ns).Get(ctx, name, metav1.GetOptions{})
			return err
		}))
	}
}

// ownedClaims creates and binds the claims the attach, resize, snapshot and group loops
// work on, and returns their PVs by claim name.
func (e *env) ownedClaims(names []string, labels map[string]map[string]string) (map[string]string, error) {
	for _, n := range names {
		if err := e.claim(n, labels[n]); err != nil {
			return nil, err
		}
	}
	pvs := map[string]string{}
	for _, n := range names {
		pv, err := e.bound(n)
		if err != nil {
			return nil, err
		}
		pvs[n] = pv
	}
	return pvs, nil
}

// deleteOwned deletes the owned claims and waits until their PVs are gone.
func (e *env) deleteOwned(pvs map[string]string) error {
	for claim, pv := range pvs {
		if err := e.deleteClaim(claim, pv); err != nil {
			return err
		}
	}
	return nil
}

// elapsed is a duration rounded for a log line.
func elapsed(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
