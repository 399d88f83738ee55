package verify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// groupSnapshotCase is the case of group snapshots; allCases lists it.
func groupSnapshotCase() *testCase {
	return &testCase{name: "snapshot/group", host: true, applies: groupSnapshotApplies, run: groupSnapshotRestore}
}

// groupSnapshotApplies: the driver serves the GroupController, and the cluster serves
// VolumeSnapshots and VolumeGroupSnapshots.
func groupSnapshotApplies(e *env) string {
	if r := snapshotApplies(e); r != "" {
		return r
	}
	if !e.served(kubecheck.GroupSnapshotGVR) {
		return "the cluster does not serve groupsnapshot.storage.k8s.io/v1 VolumeGroupSnapshots"
	}
	if e.caps.known && e.conn != nil {
		ctx, cancel := e.conn.WithTimeout(context.Background())
		defer cancel()
		rsp, err := e.conn.Identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
		if err != nil {
			return "GetPluginCapabilities: " + err.Error()
		}
		for _, c := range rsp.GetCapabilities() {
			if c.GetService().GetType() == csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE {
				return ""
			}
		}
		return "the driver does not advertise GROUP_CONTROLLER_SERVICE"
	}
	return ""
}

func (e *env) served(gvr schema.GroupVersionResource) bool {
	list, err := e.cs.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true
		}
	}
	return false
}

// groupSnapshotRestore: two claims are written, taken in one VolumeGroupSnapshot, then
// overwritten; a claim restored from each member holds what its claim held at the snapshot.
// Deleting the group deletes its members.
func groupSnapshotRestore(k *caseEnv) (err error) {
	want := map[string]string{}
	dirs := map[string]string{}
	for _, name := range []string{"first", "second"} {
		u, err := k.useClaim(name, classWFFC, defaultSize, "writer-"+name)
		if err != nil {
			return err
		}
		want[name] = "claim " + name + " of " + k.ns + " before the group snapshot\n"
		if err := os.WriteFile(filepath.Join(u.dir, "proof.txt"), []byte(want[name]), 0o644); err != nil {
			return fmt.Errorf("write through the mount path: %w", err)
		}
		dirs[name] = u.dir
		patch := []byte(`{"metadata":{"labels":{"kubevol.io/verify-group":"g"}}}`)
		if _, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Patch(k.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label claim %s: %w", name, err)
		}
	}
	class, err := k.ensureGroupClass(k.ctx)
	if err != nil {
		return err
	}
	res := k.dyn.Resource(kubecheck.GroupSnapshotGVR).Namespace(k.ns)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "groupsnapshot.storage.k8s.io/v1",
		"kind":       "VolumeGroupSnapshot",
		"metadata":   map[string]any{"name": "group", "namespace": k.ns},
		"spec": map[string]any{
			"volumeGroupSnapshotClassName": class,
			"source":                       map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"kubevol.io/verify-group": "g"}}},
		},
	}}
	if _, err := res.Create(k.ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create VolumeGroupSnapshot: %w", err)
	}
	var members map[string]string
	var restoring []string // the claims whose member a claim restored-<name> restores
	defer func() {
		// A claim still restoring from a member holds the member, and with it the group:
		// it goes first, with its reader pod (which holds the claim).
		for _, name := range restoring {
			if derr := k.cs.CoreV1().Pods(k.ns).Delete(context.Background(), "reader-"+name, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
				err = errors.Join(err, derr)
			}
			if derr := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Delete(context.Background(), "restored-"+name, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
				err = errors.Join(err, derr)
			}
		}
		err = errors.Join(err, k.deleteGroup(res, "group", members))
		if derr := k.dyn.Resource(kubecheck.GroupSnapshotClassGVR).Delete(context.Background(), class, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
			err = errors.Join(err, derr)
		}
	}()
	cur, err := kubecheck.WaitReadyToUse(k.ctx, res, "group", waitTimeout)
	if err != nil {
		return fmt.Errorf("VolumeGroupSnapshot %w", err)
	}
	uid := cur.GetUID()
	members, err = k.groupMembers(uid)
	if err != nil {
		return err
	}
	for name, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "proof.txt"), []byte("overwritten after the group snapshot\n"), 0o644); err != nil {
			return fmt.Errorf("overwrite through the mount path: %w", err)
		}
		member := members[name]
		if member == "" {
			return fmt.Errorf("the group has no member VolumeSnapshot of claim %s (members: %v)", name, members)
		}
		if err := k.waitSnapshotReady(member); err != nil {
			return err
		}
		src := &corev1.TypedLocalObjectReference{APIGroup: ptr.To(kubecheck.SnapshotGVR.Group), Kind: "VolumeSnapshot", Name: member}
		restored := "restored-" + name
		restoring = append(restoring, name)
		if _, err := k.claim(restored, classWFFC, defaultSize, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce, src); err != nil {
			return err
		}
		if err := k.reuse(&inUse{vols: []corev1.Volume{kubecheck.ClaimVolume("data", restored)}, want: want[name]}, restored, "reader-"+name); err != nil {
			return fmt.Errorf("claim restored from the member of %s: %w", name, err)
		}
	}
	return nil
}

// groupMembers maps claim name to the member VolumeSnapshot the group with uid owns.
func (k *caseEnv) groupMembers(uid types.UID) (map[string]string, error) {
	out := map[string]string{}
	err := kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		list, err := k.dyn.Resource(kubecheck.SnapshotGVR).Namespace(k.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range list.Items {
			for _, o := range s.GetOwnerReferences() {
				if o.UID == uid {
					claim, _, _ := unstructured.NestedString(s.Object, "spec", "source", "persistentVolumeClaimName")
					out[claim] = s.GetName()
				}
			}
		}
		return len(out) == 2, nil
	})
	if err != nil {
		return out, fmt.Errorf("the group's member VolumeSnapshots did not appear: %w (found %v)", err, out)
	}
	return out, nil
}

func (k *caseEnv) waitSnapshotReady(name string) error {
	if _, err := kubecheck.WaitReadyToUse(k.ctx, k.dyn.Resource(kubecheck.SnapshotGVR).Namespace(k.ns), name, waitTimeout); err != nil {
		return fmt.Errorf("member VolumeSnapshot %w", err)
	}
	return nil
}

// deleteGroup deletes the group and waits until it and its member VolumeSnapshots (claim
// name to VolumeSnapshot name, as groupMembers found them) are gone: the snapshot-controller
// deletes a group's members with it.
func (k *caseEnv) deleteGroup(res interface {
	Delete(context.Context, string, metav1.DeleteOptions, ...string) error
	Get(context.Context, string, metav1.GetOptions, ...string) (*unstructured.Unstructured, error)
}, name string, members map[string]string) error {
	ctx := context.Background()
	if err := res.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete VolumeGroupSnapshot: %w", err)
	}
	err := kubecheck.Poll(ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		_, err := res.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("VolumeGroupSnapshot %s not deleted: %w", name, err)
	}
	snaps := k.dyn.Resource(kubecheck.SnapshotGVR).Namespace(k.ns)
	for _, claim := range slices.Sorted(maps.Keys(members)) {
		member := members[claim]
		err := kubecheck.Poll(ctx, waitTimeout, func(ctx context.Context) (bool, error) {
			_, err := snaps.Get(ctx, member, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			return fmt.Errorf("member VolumeSnapshot %s (of claim %s) not deleted with its VolumeGroupSnapshot %s: %w", member, claim, name, err)
		}
	}
	return nil
}

// ensureGroupClass creates the run's VolumeGroupSnapshotClass for the driver, once.
func (k *caseEnv) ensureGroupClass(ctx context.Context) (string, error) {
	name := "kubevol-verify-" + k.runID
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion":     "groupsnapshot.storage.k8s.io/v1",
		"kind":           "VolumeGroupSnapshotClass",
		"metadata":       map[string]any{"name": name, "labels": map[string]any{runLabel: k.runID}},
		"driver":         k.driver,
		"deletionPolicy": "Delete",
	}}
	if _, err := k.dyn.Resource(kubecheck.GroupSnapshotClassGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create VolumeGroupSnapshotClass: %w", err)
	}
	return name, nil
}
