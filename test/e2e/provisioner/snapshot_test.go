package provisioner_test

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// With the snapshot.storage.k8s.io CRDs installed, a claim restores a ready snapshot; a
// restore that changes the volume mode is refused (--prevent-volume-mode-conversion).
// The external-snapshotter is not run: the test takes the snapshot through CSI and writes
// the VolumeSnapshot and a ready VolumeSnapshotContent itself.
func TestRestoreFromSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	installSnapshotCRDs(t, e.ctx)
	dyn, err := dynamic.NewForConfig(framework.RESTConfig())
	fatalIf(t, err, "dynamic client")

	sc := e.class(nil)
	src := e.createClaim(claimSpec("source", sc.Name, "16Mi", nil))
	_, srcPV := e.waitBound(src.Name, time.Minute)
	cctx, cancel := e.conn.WithTimeout(e.ctx)
	snap, err := e.conn.Controller.CreateSnapshot(cctx, &csi.CreateSnapshotRequest{SourceVolumeId: srcPV.Spec.CSI.VolumeHandle, Name: "snap-" + string(src.UID)})
	cancel()
	fatalIf(t, err, "CSI CreateSnapshot")

	contentName := "content-" + e.ns
	vs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": "snap", "namespace": e.ns},
		"spec":     map[string]any{"source": map[string]any{"volumeSnapshotContentName": contentName}},
		"status":   map[string]any{"boundVolumeSnapshotContentName": contentName, "readyToUse": true},
	}}
	vs, err = dyn.Resource(kubecheck.SnapshotGVR).Namespace(e.ns).Create(e.ctx, vs, metav1.CreateOptions{})
	fatalIf(t, err, "create VolumeSnapshot")
	vsc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
		"metadata": map[string]any{"name": contentName},
		"spec": map[string]any{
			"driver": e.driver, "deletionPolicy": "Retain", "sourceVolumeMode": "Filesystem",
			"source":            map[string]any{"snapshotHandle": snap.GetSnapshot().GetSnapshotId()},
			"volumeSnapshotRef": map[string]any{"name": "snap", "namespace": e.ns, "uid": string(vs.GetUID())},
		},
		"status": map[string]any{"readyToUse": true, "snapshotHandle": snap.GetSnapshot().GetSnapshotId(), "restoreSize": snap.GetSnapshot().GetSizeBytes()},
	}}
	_, err = dyn.Resource(kubecheck.SnapshotContentGVR).Create(e.ctx, vsc, metav1.CreateOptions{})
	fatalIf(t, err, "create VolumeSnapshotContent")
	t.Cleanup(func() {
		_ = dyn.Resource(kubecheck.SnapshotContentGVR).Delete(context.Background(), contentName, metav1.DeleteOptions{})
	})

	group := "snapshot.storage.k8s.io"
	source := &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: "snap"}
	restored := e.createClaim(claimSpec("restored", sc.Name, "16Mi", func(p *corev1.PersistentVolumeClaim) { p.Spec.DataSource = source }))
	e.waitBound(restored.Name, time.Minute)

	block := corev1.PersistentVolumeBlock
	e.createClaim(claimSpec("as-block", sc.Name, "16Mi", func(p *corev1.PersistentVolumeClaim) {
		p.Spec.DataSource = source
		p.Spec.VolumeMode = &block
	}))
	e.waitEvent("as-block", "ProvisioningFailed", "cannot be restored as Block")
	e.waitVolumes(2, 10*time.Second)
	e.deleteClaim(restored.Name)
	e.deleteClaim("as-block")
	e.deleteClaim(src.Name)
	e.waitVolumes(0, time.Minute)
	cctx, cancel = e.conn.WithTimeout(e.ctx)
	_, err = e.conn.Controller.DeleteSnapshot(cctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId()})
	cancel()
	fatalIf(t, err, "CSI DeleteSnapshot")
}

// installSnapshotCRDs installs schemaless VolumeSnapshot and VolumeSnapshotContent CRDs
// (no status subresource, so that a test can write status directly) and removes them at
// the end.
func installSnapshotCRDs(t *testing.T, ctx context.Context) {
	cs, err := apiextensionsClient()
	fatalIf(t, err, "apiextensions client")
	for _, c := range []struct {
		plural, kind string
		scope        apiextensionsv1.ResourceScope
	}{{"volumesnapshots", "VolumeSnapshot", apiextensionsv1.NamespaceScoped}, {"volumesnapshotcontents", "VolumeSnapshotContent", apiextensionsv1.ClusterScoped}} {
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: c.plural + ".snapshot.storage.k8s.io",
				// k8s.io groups need this; the value is what the external-snapshotter CRDs carry.
				Annotations: map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes-csi/external-snapshotter/pull/419"}},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "snapshot.storage.k8s.io", Scope: c.scope,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: c.plural, Kind: c.kind},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
			},
		}
		_, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
		fatalIf(t, err, "create CRD %s", crd.Name)
		t.Cleanup(func() {
			_ = cs.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
		})
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			cur, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, cond := range cur.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		fatalIf(t, err, "CRD %s not established", crd.Name)
	}
}
