package provisioner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// An Immediate claim gets a PV shaped exactly as external-provisioner shapes it, is bound by
// the real PV controller, and deleting it deletes the backend volume and the PV.
func TestImmediateProvisionBindAndDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	sc := e.class(func(sc *storagev1.StorageClass) {
		sc.MountOptions = []string{"noatime"}
		sc.Parameters = map[string]string{"csi.storage.k8s.io/fstype": "ext4"}
	})
	pvc := e.createClaim(claimSpec("data", sc.Name, "64Mi", nil))
	pvc, pv := e.waitBound(pvc.Name, time.Minute)

	if want := "pvc-" + string(pvc.UID); pv.Name != want {
		t.Errorf("PV name %s, want %s", pv.Name, want)
	}
	if r := pv.Spec.ClaimRef; r == nil || r.UID != pvc.UID || r.Name != pvc.Name || r.Namespace != e.ns || r.Kind != "PersistentVolumeClaim" {
		t.Errorf("claimRef %+v", r)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("reclaim policy %s", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	for k, want := range map[string]string{
		"pv.kubernetes.io/provisioned-by":                            e.driver,
		"volume.kubernetes.io/provisioner-deletion-secret-name":      "",
		"volume.kubernetes.io/provisioner-deletion-secret-namespace": "",
	} {
		if got, ok := pv.Annotations[k]; !ok || got != want {
			t.Errorf("annotation %s = %q (present %v), want %q", k, got, ok, want)
		}
	}
	if !containsString(pv.Finalizers, "external-provisioner.volume.kubernetes.io/finalizer") {
		t.Errorf("finalizers %v", pv.Finalizers)
	}
	csiSrc := pv.Spec.CSI
	if csiSrc == nil || csiSrc.Driver != e.driver || csiSrc.FSType != "ext4" || csiSrc.VolumeAttributes["storage.kubernetes.io/csiProvisionerIdentity"] == "" {
		t.Fatalf("csi source %+v", csiSrc)
	}
	if pv.Spec.MountOptions[0] != "noatime" || pv.Spec.StorageClassName != sc.Name {
		t.Errorf("mountOptions %v class %s", pv.Spec.MountOptions, pv.Spec.StorageClassName)
	}
	na := pv.Spec.NodeAffinity
	if na == nil || len(na.Required.NodeSelectorTerms) != 1 || na.Required.NodeSelectorTerms[0].MatchExpressions[0].Key != topologyKey ||
		na.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != e.node {
		t.Errorf("nodeAffinity %+v", na)
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.String() != "64Mi" {
		t.Errorf("capacity %s", q.String())
	}
	e.waitEvent(pvc.Name, "Provisioning", "External provisioner is provisioning volume for claim")
	e.waitEvent(pvc.Name, "ProvisioningSucceeded", "Successfully provisioned volume "+pv.Name)
	if vols := e.volumes(); len(vols) != 1 || vols[0] != csiSrc.VolumeHandle {
		t.Fatalf("driver volumes %v, want [%s]", vols, csiSrc.VolumeHandle)
	}
	m := e.metrics()
	for _, want := range []string{`csi_sidecar_operations_seconds_count{driver_name="` + e.driver + `",grpc_status_code="OK",method_name="/csi.v1.Controller/CreateVolume"} 1`,
		"controller_persistentvolumeclaim_provision_total", `workqueue_adds_total{name="claims"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	e.deleteClaim(pvc.Name)
	e.waitGone(e.pvGetter(pv.Name), "PV "+pv.Name, time.Minute)
	e.waitVolumes(0, 30*time.Second)
}

// Retain keeps the volume and the PV, and drops the deletion-protection finalizer.
func TestRetainPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	retain := corev1.PersistentVolumeReclaimRetain
	sc := e.class(func(sc *storagev1.StorageClass) { sc.ReclaimPolicy = &retain })
	pvc := e.createClaim(claimSpec("keep", sc.Name, "16Mi", nil))
	_, pv := e.waitBound(pvc.Name, time.Minute)
	if pv.Spec.PersistentVolumeReclaimPolicy != retain {
		t.Fatalf("policy %s", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	e.deleteClaim(pvc.Name)
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err == nil && cur.Status.Phase == corev1.VolumeReleased && !containsString(cur.Finalizers, "external-provisioner.volume.kubernetes.io/finalizer"), nil
	})
	fatalIf(t, err, "PV %s not Released without the finalizer", pv.Name)
	if vols := e.volumes(); len(vols) != 1 {
		t.Fatalf("Retain deleted the volume: %v", vols)
	}
	// The administrator deletes the PV; the backend volume stays, as Retain promises.
	fatalIf(t, e.cs.CoreV1().PersistentVolumes().Delete(e.ctx, pv.Name, metav1.DeleteOptions{}), "delete PV")
	e.waitGone(e.pvGetter(pv.Name), "PV", time.Minute)
	if vols := e.volumes(); len(vols) != 1 {
		t.Fatalf("volumes %v", vols)
	}
}

// Block volume mode, ReadWriteOncePod and --extra-create-metadata reach the driver and the PV.
func TestBlockRWOPAndExtraMetadata(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{provArgs: []string{"--extra-create-metadata"}})
	sc := e.class(func(sc *storagev1.StorageClass) { sc.Parameters = map[string]string{"type": "block"} })
	block := corev1.PersistentVolumeBlock
	pvc := e.createClaim(claimSpec("raw", sc.Name, "32Mi", func(p *corev1.PersistentVolumeClaim) {
		p.Spec.VolumeMode = &block
		p.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
	}))
	_, pv := e.waitBound(pvc.Name, time.Minute)
	if pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode != block || pv.Spec.CSI.FSType != "" || pv.Spec.AccessModes[0] != corev1.ReadWriteOncePod {
		t.Fatalf("PV spec %+v", pv.Spec)
	}
	// The driver records the parameters it got; --extra-create-metadata must have added these.
	state, err := os.ReadFile(filepath.Join(e.dir, "state", "controller.json"))
	fatalIf(t, err, "driver state")
	for _, want := range []string{`"csi.storage.k8s.io/pvc/name":"raw"`, `"csi.storage.k8s.io/pvc/namespace":"` + e.ns + `"`, `"csi.storage.k8s.io/pv/name":"` + pv.Name + `"`} {
		if !strings.Contains(string(state), want) {
			t.Errorf("CreateVolume parameters lack %s", want)
		}
	}
	e.deleteClaim(pvc.Name)
	e.waitGone(e.pvGetter(pv.Name), "PV", time.Minute)
	e.waitVolumes(0, 30*time.Second)
}

// WaitForFirstConsumer waits for selected-node, then provisions on that node's topology.
// A selected node that does not exist is a final error: selected-node is removed so that
// the scheduler picks again.
func TestWaitForFirstConsumerAndReschedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{provArgs: []string{"--strict-topology"}})
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := e.class(func(sc *storagev1.StorageClass) { sc.VolumeBindingMode = &wffc })
	pvc := e.createClaim(claimSpec("late", sc.Name, "16Mi", nil))
	time.Sleep(2 * time.Second)
	if vols := e.volumes(); len(vols) != 0 {
		t.Fatalf("provisioned before a node was selected: %v", vols)
	}
	patch := `{"metadata":{"annotations":{"volume.kubernetes.io/selected-node":"` + e.node + `"}}}`
	_, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(e.ctx, pvc.Name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	fatalIf(t, err, "select node")
	_, pv := e.waitBound(pvc.Name, time.Minute)
	if v := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0]; v != e.node {
		t.Errorf("volume on %s, want %s", v, e.node)
	}

	gone := e.createClaim(claimSpec("gone-node", sc.Name, "16Mi", func(p *corev1.PersistentVolumeClaim) {
		p.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "no-such-node"}
	}))
	e.waitEvent(gone.Name, "ProvisioningFailed", "selected node no-such-node no longer exists")
	err = wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, gone.Name, metav1.GetOptions{})
		_, has := cur.Annotations["volume.kubernetes.io/selected-node"]
		return err == nil && !has, nil
	})
	fatalIf(t, err, "selected-node was not removed")
	if vols := e.volumes(); len(vols) != 1 {
		t.Fatalf("volumes %v, want only the bound one", vols)
	}
}

// Secrets of all seven kinds: the provisioner secret is templated, read for CreateVolume and
// remembered on the PV for DeleteVolume; five land in the PV's secret references and the
// controller-modify one in its annotations.
func TestSecretsTemplates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{readSecrets: true})
	_, err := e.cs.CoreV1().Secrets(e.ns).Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds-data"},
		StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
	fatalIf(t, err, "secret")
	sc := e.class(func(sc *storagev1.StorageClass) {
		sc.Parameters = map[string]string{
			"csi.storage.k8s.io/provisioner-secret-name":             "creds-${pvc.name}",
			"csi.storage.k8s.io/provisioner-secret-namespace":        "${pvc.namespace}",
			"csi.storage.k8s.io/node-stage-secret-name":              "${pvc.annotations['team.io/secret']}",
			"csi.storage.k8s.io/node-stage-secret-namespace":         "${pvc.namespace}",
			"csi.storage.k8s.io/controller-expand-secret-name":       "expand",
			"csi.storage.k8s.io/controller-expand-secret-namespace":  "kube-system",
			"csi.storage.k8s.io/controller-publish-secret-name":      "publish-${pv.name}",
			"csi.storage.k8s.io/controller-publish-secret-namespace": "${pvc.namespace}",
			"csi.storage.k8s.io/node-publish-secret-name":            "node-publish",
			"csi.storage.k8s.io/node-publish-secret-namespace":       "${pvc.namespace}",
			"csi.storage.k8s.io/node-expand-secret-name":             "node-expand",
			"csi.storage.k8s.io/node-expand-secret-namespace":        "${pvc.namespace}",
			"csi.storage.k8s.io/controller-modify-secret-name":       "modify",
			"csi.storage.k8s.io/controller-modify-secret-namespace":  "${pvc.namespace}",
		}
	})
	pvc := e.createClaim(claimSpec("data", sc.Name, "16Mi", func(p *corev1.PersistentVolumeClaim) {
		p.Annotations = map[string]string{"team.io/secret": "stage-creds"}
	}))
	_, pv := e.waitBound(pvc.Name, time.Minute)
	if pv.Annotations["volume.kubernetes.io/provisioner-deletion-secret-name"] != "creds-data" ||
		pv.Annotations["volume.kubernetes.io/provisioner-deletion-secret-namespace"] != e.ns {
		t.Errorf("deletion secret annotations %v", pv.Annotations)
	}
	if r := pv.Spec.CSI.NodeStageSecretRef; r == nil || r.Name != "stage-creds" || r.Namespace != e.ns {
		t.Errorf("nodeStageSecretRef %+v", r)
	}
	if r := pv.Spec.CSI.ControllerExpandSecretRef; r == nil || r.Name != "expand" || r.Namespace != "kube-system" {
		t.Errorf("controllerExpandSecretRef %+v", r)
	}
	for name, r := range map[string]*corev1.SecretReference{
		"publish-" + pv.Name: pv.Spec.CSI.ControllerPublishSecretRef, "node-publish": pv.Spec.CSI.NodePublishSecretRef, "node-expand": pv.Spec.CSI.NodeExpandSecretRef,
	} {
		if r == nil || r.Name != name || r.Namespace != e.ns {
			t.Errorf("secret reference %+v, want %s/%s", r, e.ns, name)
		}
	}
	if pv.Annotations["volume.kubernetes.io/controller-modify-secret-name"] != "modify" || pv.Annotations["volume.kubernetes.io/controller-modify-secret-namespace"] != e.ns {
		t.Errorf("controller-modify annotations %v", pv.Annotations)
	}
	e.deleteClaim(pvc.Name)
	e.waitGone(e.pvGetter(pv.Name), "PV", time.Minute)
	e.waitVolumes(0, 30*time.Second)
}

// Each bad input leaves a ProvisioningFailed event that says what to fix, and no volume.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, tc := range []struct {
		name   string
		params map[string]string
		mutate func(*corev1.PersistentVolumeClaim)
		size   string
		want   string
	}{
		{name: "bad-template", params: map[string]string{
			"csi.storage.k8s.io/provisioner-secret-name": "${pvc.labels}", "csi.storage.k8s.io/provisioner-secret-namespace": "x"},
			want: "invalid tokens [${pvc.labels}]"},
		{name: "namespace-from-claim-name", params: map[string]string{
			"csi.storage.k8s.io/provisioner-secret-name": "s", "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.name}"},
			want: "invalid tokens [${pvc.name}]"},
		{name: "unknown-prefixed", params: map[string]string{"csi.storage.k8s.io/fs-type": "xfs"},
			want: `found unknown parameter key "csi.storage.k8s.io/fs-type" with reserved namespace csi.storage.k8s.io/`},
		{name: "missing-secret", params: map[string]string{
			"csi.storage.k8s.io/provisioner-secret-name": "nope", "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}"},
			want: "cannot read the provisioner secret"},
		{name: "oversized", size: "100Ti", want: "failed to provision volume with StorageClass"},
		{name: "bad-driver-parameter", params: map[string]string{"type": "tape"}, want: "infeasible"},
		{name: "unsupported-access-mode", mutate: func(p *corev1.PersistentVolumeClaim) {
			p.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}, want: "access mode MULTI_NODE_MULTI_WRITER: kubevol volumes are local to one node"},
		{name: "selector", mutate: func(p *corev1.PersistentVolumeClaim) {
			p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}, want: "claim Selector is not supported"},
	} {
		sc := e.class(func(sc *storagev1.StorageClass) { sc.Parameters = tc.params })
		size := tc.size
		if size == "" {
			size = "16Mi"
		}
		e.createClaim(claimSpec(tc.name, sc.Name, size, tc.mutate))
		e.waitEvent(tc.name, "ProvisioningFailed", tc.want)
	}
	if vols := e.volumes(); len(vols) != 0 {
		t.Fatalf("bad inputs left volumes: %v", vols)
	}
	pvs, err := e.cs.CoreV1().PersistentVolumes().List(e.ctx, metav1.ListOptions{})
	fatalIf(t, err, "list PVs")
	for _, pv := range pvs.Items {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == e.driver {
			t.Errorf("bad input made PV %s", pv.Name)
		}
	}
}

// A PVC clone protects its source until the clone is provisioned, then releases it.
func TestClone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	sc := e.class(nil)
	src := e.createClaim(claimSpec("source", sc.Name, "16Mi", nil))
	e.waitBound(src.Name, time.Minute)
	clone := e.createClaim(claimSpec("clone", sc.Name, "16Mi", func(p *corev1.PersistentVolumeClaim) {
		p.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: src.Name}
	}))
	e.waitBound(clone.Name, time.Minute)
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, src.Name, metav1.GetOptions{})
		return err == nil && !containsString(cur.Finalizers, "provisioner.storage.kubernetes.io/cloning-protection"), nil
	})
	fatalIf(t, err, "clone source still protected")
	e.waitVolumes(2, 10*time.Second)
	e.deleteClaim(clone.Name)
	e.deleteClaim(src.Name)
	e.waitVolumes(0, time.Minute)
}

// Without the snapshot.storage.k8s.io CRDs a snapshot data source is refused with an event.
// Not parallel, so that it runs before TestRestoreFromSnapshot installs the CRDs.
func TestSnapshotSourceWithoutCRDs(t *testing.T) {
	e := newEnv(t, envOptions{})
	if _, err := e.cs.Discovery().ServerResourcesForGroupVersion("snapshot.storage.k8s.io/v1"); err == nil {
		t.Skip("the snapshot CRDs are installed in this cluster")
	} else if !apierrors.IsNotFound(err) {
		t.Logf("discovery: %v", err)
	}
	sc := e.class(nil)
	group := "snapshot.storage.k8s.io"
	e.createClaim(claimSpec("restore", sc.Name, "16Mi", func(p *corev1.PersistentVolumeClaim) {
		p.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: "snap"}
	}))
	e.waitEvent("restore", "ProvisioningFailed", "CRDs are not installed")
	if vols := e.volumes(); len(vols) != 0 {
		t.Fatalf("volumes %v", vols)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
