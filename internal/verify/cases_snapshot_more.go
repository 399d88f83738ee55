package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

func snapshotRef(name string) *corev1.TypedLocalObjectReference {
	return &corev1.TypedLocalObjectReference{APIGroup: ptr.To(kubecheck.SnapshotGVR.Group), Kind: "VolumeSnapshot", Name: name}
}

// snapshotOverwrite: a snapshot is a point in time (upstream's snapshottable "should check
// snapshot fields, check restore correctly works after modifying source data"): the source
// is overwritten after the snapshot, the restore holds the original data. Deleting the
// snapshot of a Delete class removes its content and the driver's snapshot.
func snapshotOverwrite(k *caseEnv) error {
	want, err := k.filledClaim("source")
	if err != nil {
		return err
	}
	if err := k.snapshot("snap", "source"); err != nil {
		return err
	}
	content, handle, err := k.snapshotContent("snap")
	if err != nil {
		return err
	}
	p, err := k.runPod("overwriter", []corev1.Volume{kubecheck.ClaimVolume("data", "source")}, nil, nil)
	if err != nil {
		return err
	}
	dir, err := k.claimPath(p, "source")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "proof.txt"), []byte("overwritten after the snapshot\n"), 0o644); err != nil {
		return err
	}
	if err := k.deletePod("overwriter"); err != nil {
		return err
	}
	if err := k.checkCopy("restored", snapshotRef("snap"), want); err != nil {
		return fmt.Errorf("restore of a snapshot taken before the source was overwritten: %w", err)
	}
	if err := k.deleteSnapshots(); err != nil {
		return err
	}
	if err := k.waitContentGone(content); err != nil {
		return fmt.Errorf("VolumeSnapshotContent of a Delete class outlives its snapshot: %w", err)
	}
	return k.checkSnapshotListed(handle, false)
}

// snapshotRetainImport: the content of a Retain class, and the driver's snapshot, outlive
// the VolumeSnapshot and its content object; the snapshot handle, imported as a
// pre-provisioned VolumeSnapshotContent, restores the data (upstream's "pre-provisioned
// snapshot" patterns), and deleting that Delete content removes the driver's snapshot.
func snapshotRetainImport(k *caseEnv) error {
	want, err := k.filledClaim("source")
	if err != nil {
		return err
	}
	class, err := k.snapshotClassFor(k.ctx, "Retain")
	if err != nil {
		return err
	}
	if _, err := k.snapshotFrom("kept", class, map[string]any{"persistentVolumeClaimName": "source"}); err != nil {
		return err
	}
	content, handle, err := k.snapshotContent("kept")
	if err != nil {
		return err
	}
	// Whatever happens, the retained content and its driver snapshot go with the case.
	defer k.removeContent(content)
	if err := k.deleteSnapshots(); err != nil {
		return err
	}
	contents := k.dyn.Resource(kubecheck.SnapshotContentGVR)
	if _, err := contents.Get(k.ctx, content, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("VolumeSnapshotContent %s of a Retain class, after its snapshot was deleted: %w", content, err)
	}
	if err := k.checkSnapshotListed(handle, true); err != nil {
		return err
	}
	if err := contents.Delete(k.ctx, content, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := k.waitContentGone(content); err != nil {
		return err
	}
	if err := k.checkSnapshotListed(handle, true); err != nil {
		return fmt.Errorf("deleting a Retain content deleted the driver's snapshot: %w", err)
	}
	imported := "verify-" + k.ns + "-imported"
	defer k.removeContent(imported)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1",
		"kind":       "VolumeSnapshotContent",
		"metadata":   map[string]any{"name": imported, "labels": map[string]any{runLabel: k.runID}},
		"spec": map[string]any{
			"deletionPolicy":    "Delete",
			"driver":            k.driver,
			"source":            map[string]any{"snapshotHandle": handle},
			"volumeSnapshotRef": map[string]any{"name": "imported", "namespace": k.ns},
		},
	}}
	if _, err := contents.Create(k.ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the pre-provisioned VolumeSnapshotContent: %w", err)
	}
	if _, err := k.snapshotFrom("imported", "", map[string]any{"volumeSnapshotContentName": imported}); err != nil {
		return err
	}
	if err := k.checkCopy("restored", snapshotRef("imported"), want); err != nil {
		return fmt.Errorf("restore of a pre-provisioned snapshot: %w", err)
	}
	if err := k.deleteSnapshots(); err != nil {
		return err
	}
	if err := k.waitContentGone(imported); err != nil {
		return err
	}
	return k.checkSnapshotListed(handle, false)
}

// snapshotContent is the bound content of a ready VolumeSnapshot and its snapshot handle.
func (k *caseEnv) snapshotContent(snapshot string) (name, handle string, err error) {
	vs, err := k.dyn.Resource(kubecheck.SnapshotGVR).Namespace(k.ns).Get(k.ctx, snapshot, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	name, _, _ = unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	if name == "" {
		return "", "", fmt.Errorf("VolumeSnapshot %s is ready without a bound content", snapshot)
	}
	c, err := k.dyn.Resource(kubecheck.SnapshotContentGVR).Get(k.ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	handle, _, _ = unstructured.NestedString(c.Object, "status", "snapshotHandle")
	if handle == "" {
		return "", "", fmt.Errorf("VolumeSnapshotContent %s has no snapshot handle", name)
	}
	return name, handle, nil
}

func (k *caseEnv) waitContentGone(name string) error {
	err := kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		_, err := k.dyn.Resource(kubecheck.SnapshotContentGVR).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("VolumeSnapshotContent %s not deleted: %w", name, err)
	}
	return nil
}

// removeContent deletes a content the case made or retained, switched to Delete so that
// the driver's snapshot goes too.
func (k *caseEnv) removeContent(name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.ctx), waitTimeout)
	defer cancel()
	res := k.dyn.Resource(kubecheck.SnapshotContentGVR)
	if _, err := res.Get(ctx, name, metav1.GetOptions{}); err != nil {
		return
	}
	_, _ = res.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"deletionPolicy":"Delete"}}`), metav1.PatchOptions{})
	_ = res.Delete(ctx, name, metav1.DeleteOptions{})
}

// checkSnapshotListed checks ListSnapshots (when the driver offers it) for a snapshot.
func (k *caseEnv) checkSnapshotListed(handle string, want bool) error {
	if k.conn == nil || !k.caps.controller[csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS] {
		return nil
	}
	cctx, cancel := k.conn.WithTimeout(k.ctx)
	defer cancel()
	rsp, err := k.conn.Controller.ListSnapshots(cctx, &csi.ListSnapshotsRequest{SnapshotId: handle})
	if err != nil {
		return fmt.Errorf("ListSnapshots: %w", err)
	}
	got := false
	for _, e := range rsp.GetEntries() {
		got = got || e.GetSnapshot().GetSnapshotId() == handle
	}
	if got != want {
		if want {
			return fmt.Errorf("ListSnapshots does not list snapshot %s, which a Retain content keeps", handle)
		}
		return fmt.Errorf("ListSnapshots still lists snapshot %s after its content was deleted", handle)
	}
	return nil
}
