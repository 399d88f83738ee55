package lifecycle

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/migration"
	"github.com/kubevol/kubevol/pkg/volume"
	csiplugin "github.com/kubevol/kubevol/pkg/volume/plugins/csi"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// migrationTarget is a CSI driver an in-tree plugin migrated to, whose name kubevol's
// driver takes, with a zone of the target's shape: the translation checks its input (EBS
// derives the region from an AWS zone), and nothing in the translation path is changed.
type migrationTarget struct {
	name, driver, inTree string
	zoneKey, zone        string
	// nodeLabels are the Node's well-known topology labels, as a cloud's node has them.
	nodeLabels map[string]string
	// source is the in-tree PV source of a volume ID, inline the pod volume source.
	source func(id string) corev1.PersistentVolumeSource
	inline func(id string) corev1.VolumeSource
	// volumeID is the volume ID of an in-tree PV of the plugin.
	volumeID func(*corev1.PersistentVolume) string
}

var migrationTargets = []migrationTarget{{
	name: "aws-ebs", driver: "ebs.csi.aws.com", inTree: "kubernetes.io/aws-ebs",
	zoneKey: "topology.ebs.csi.aws.com/zone", zone: "us-east-1a",
	nodeLabels: map[string]string{corev1.LabelTopologyZone: "us-east-1a", corev1.LabelTopologyRegion: "us-east-1"},
	source: func(id string) corev1.PersistentVolumeSource {
		return corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: id}}
	},
	inline: func(id string) corev1.VolumeSource {
		return corev1.VolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: id}}
	},
	volumeID: func(pv *corev1.PersistentVolume) string {
		if s := pv.Spec.AWSElasticBlockStore; s != nil {
			return s.VolumeID
		}
		return ""
	},
}, {
	// Cinder keeps the volume handle verbatim and has no region to derive.
	name: "cinder", driver: "cinder.csi.openstack.org", inTree: "kubernetes.io/cinder",
	zoneKey: "topology.cinder.csi.openstack.org/zone", zone: "nova",
	nodeLabels: map[string]string{corev1.LabelTopologyZone: "nova"},
	source: func(id string) corev1.PersistentVolumeSource {
		return corev1.PersistentVolumeSource{Cinder: &corev1.CinderPersistentVolumeSource{VolumeID: id}}
	},
	inline: func(id string) corev1.VolumeSource {
		return corev1.VolumeSource{Cinder: &corev1.CinderVolumeSource{VolumeID: id}}
	},
	volumeID: func(pv *corev1.PersistentVolume) string {
		if s := pv.Spec.Cinder; s != nil {
			return s.VolumeID
		}
		return ""
	},
}}

// CSI migration end to end, for each target in parallel, every sidecar under deploy/'s
// RBAC (upstream's rules) and the agent as its node, none of them refused a request: kubevol's driver registers as the target's CSI driver,
// and kube-controller-manager hands it the in-tree plugin's work.
//   - A class parameter the driver rejects gives a ProvisioningFailed event that names it.
//   - A claim of an in-tree StorageClass becomes an in-tree PV (provisioned-by the plugin,
//     marked migrated-to the driver by kube-controller-manager), is attached, mounted at the
//     kubelet's path, written and expanded, and deleted through DeleteVolume.
//   - A static in-tree PV naming an existing volume binds and is mounted.
//   - An inline in-tree volume of a pod is attached (spec.source.inlineVolumeSpec) and
//     mounted at the kubelet's path, <driver>-<volume ID>.
//   - The agent, killed and restarted, reconstructs the three and tears them down.
//
// The CSINode lists the migrated plugins as the kubelet writes them; no volume, mount,
// attachment or loop device is left.
func TestMigration(t *testing.T) {
	t.Parallel()
	for _, tg := range migrationTargets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			testMigration(t, tg)
		})
	}
}

func testMigration(t *testing.T, tg migrationTarget) {
	e := newEnv(t, envOptions{driverName: tg.driver, attachRequired: true, resizer: true,
		driverArgs: []string{"--zone", tg.zoneKey + "=" + tg.zone}})
	conn, err := csiclient.Dial(csiclient.Config{Address: "unix://" + filepath.Join(e.dir, "csi.sock"), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// Registered after the processes: runs while the driver still serves, and deletes what
	// the test created on the backend, even after a failure.
	var created []string
	t.Cleanup(func() {
		for _, id := range created {
			ctx, cancel := conn.WithTimeout(context.Background())
			_, _ = conn.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
			cancel()
		}
	})
	e.waitMigrationTarget(tg)

	// An in-tree class whose parameter the driver rejects: the event names it.
	immediate := storagev1.VolumeBindingImmediate
	bad := "intree-bad-" + strings.ToLower(rand.String(5))
	e.apply(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: bad}, Provisioner: tg.inTree,
		Parameters: map[string]string{"type": "gp2"}, VolumeBindingMode: &immediate})
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, framework.ClaimSpec("refused", bad, "16Mi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubecheck.WaitForEvent(e.ctx, e.cs, e.ns, "refused", time.Minute, func(ev corev1.Event) bool {
		return ev.Reason == "ProvisioningFailed" && strings.Contains(ev.Message, `type="gp2"`)
	}); err != nil {
		t.Fatalf("no ProvisioningFailed event naming type=gp2 on the claim of class %s: %v", bad, err)
	}
	if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(e.ctx, "refused", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// A claim of an in-tree class, as an old cluster's gp2 class.
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	class := "intree-" + strings.ToLower(rand.String(5))
	e.apply(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: tg.inTree,
		Parameters: map[string]string{"type": "dir"}, VolumeBindingMode: &wffc, AllowVolumeExpansion: ptr.To(true)})
	claim := framework.ClaimSpec("dynamic", class, "16Mi")
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writer := e.waitVolumesReady(e.pod("writer", kubecheck.ClaimVolume("data", "dynamic")))
	pv := e.boundPV("dynamic")
	id := tg.volumeID(pv)
	switch {
	case id == "" || pv.Spec.CSI != nil:
		t.Fatalf("PV %s of the in-tree class is not an in-tree %s PV: %+v", pv.Name, tg.inTree, pv.Spec.PersistentVolumeSource)
	case pv.Annotations[pvspec.AnnProvisionedBy] != tg.inTree:
		t.Errorf("PV %s is provisioned-by %q, want the in-tree plugin %s", pv.Name, pv.Annotations[pvspec.AnnProvisionedBy], tg.inTree)
	case !slices.Contains(pv.Finalizers, pvspec.Finalizer):
		t.Errorf("PV %s has finalizers %v, want %s", pv.Name, pv.Finalizers, pvspec.Finalizer)
	case pv.Labels[corev1.LabelTopologyZone] != tg.zone:
		t.Errorf("PV %s has labels %v, want the in-tree zone label %s=%s", pv.Name, pv.Labels, corev1.LabelTopologyZone, tg.zone)
	}
	e.poll("kube-controller-manager marks PV "+pv.Name+" migrated-to "+tg.driver, func(ctx context.Context) (bool, error) {
		cur, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err == nil && cur.Annotations[migration.AnnMigratedTo] == tg.driver, nil
	})
	e.checkAttached(csiplugin.AttachmentName(id, tg.driver, e.node), func(va *storagev1.VolumeAttachment) bool {
		return va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv.Name
	})
	// The attacher's finalizer is on the in-tree PV too, as on a CSI PV.
	if cur := e.boundPV("dynamic"); !slices.Contains(cur.Finalizers, "external-attacher/"+csiclient.SanitizeDriverName(tg.driver)) {
		t.Errorf("in-tree PV %s: finalizers %v, want the attacher's", pv.Name, cur.Finalizers)
	}
	target := e.migratedMount(writer.UID, pv.Name, id, tg)
	if err := os.WriteFile(filepath.Join(target, "data.txt"), []byte("written through migration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	framework.ExpandClaim(e.ctx, t, e.cs, e.ns, "dynamic", "32Mi")
	grown := e.boundPV("dynamic")
	if got := grown.Spec.Capacity[corev1.ResourceStorage]; got.Cmp(resource.MustParse("32Mi")) < 0 || tg.volumeID(grown) != id {
		t.Errorf("PV %s after the expansion: capacity %s, volume %q; want 32Mi, in-tree volume %q", pv.Name, got.String(), tg.volumeID(grown), id)
	}

	// A static in-tree PV naming an existing volume, bound by a claim that names it.
	staticID := e.createVolume(conn, "static-"+e.ns, tg)
	created = append(created, staticID)
	staticPV := e.staticPV("static-"+e.ns, tg.source(staticID))
	static := framework.ClaimSpec("static", "", "16Mi")
	static.Spec.VolumeName = staticPV
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(e.ctx, static, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := e.waitVolumesReady(e.pod("reader", kubecheck.ClaimVolume("data", "static")))
	e.checkAttached(csiplugin.AttachmentName(staticID, tg.driver, e.node), nil)
	e.migratedMount(reader.UID, staticPV, staticID, tg)

	// An inline in-tree volume: the attach/detach controller attaches its translated spec,
	// and the agent mounts it as the kubelet does, named <driver>-<volume ID>.
	inlineID := e.createVolume(conn, "inline-"+e.ns, tg)
	created = append(created, inlineID)
	inline := e.waitVolumesReady(e.pod("inline", corev1.Volume{Name: "disk", VolumeSource: tg.inline(inlineID)}))
	e.checkAttached(csiplugin.AttachmentName(inlineID, tg.driver, e.node), func(va *storagev1.VolumeAttachment) bool {
		s := va.Spec.Source.InlineVolumeSpec
		return s != nil && s.CSI != nil && s.CSI.VolumeHandle == inlineID
	})
	e.migratedMount(inline.UID, tg.driver+"-"+inlineID, inlineID, tg)

	// The mounts count as migrated in the kubelet's operation metric.
	body := framework.Get(t, e.metrics)
	if !slices.ContainsFunc(strings.Split(body, "\n"), func(l string) bool {
		return strings.HasPrefix(l, "storage_operation_duration_seconds_count{") && strings.Contains(l, `migrated="true"`) &&
			strings.Contains(l, `operation_name="volume_mount"`) && strings.Contains(l, `volume_plugin="kubernetes.io/csi"`)
	}) {
		t.Errorf("/metrics has no migrated volume_mount of kubernetes.io/csi in storage_operation_duration_seconds")
	}

	// The agent restarts with the three volumes mounted: reconstruction finds them by the
	// kubelet's names, and tears them down below.
	e.agent.Kill()
	e.agent.Start()

	// Everything goes: the pods, the static PV (Retain: the test deletes its volume), and
	// the claim whose PV is deleted through DeleteVolume.
	for _, p := range []*corev1.Pod{writer, reader, inline} {
		e.deletePod(p)
	}
	for _, h := range []string{id, staticID, inlineID} {
		name := csiplugin.AttachmentName(h, tg.driver, e.node)
		e.poll("VolumeAttachment "+name+" deleted", func(ctx context.Context) (bool, error) {
			_, err := e.cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
	if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(e.ctx, "static", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.deleteClaim("dynamic", pv.Name)
	if !slices.Contains(e.succeeded(id), "DeleteVolume") {
		t.Errorf("volume %s of the migrated PV was not deleted through DeleteVolume; calls: %v", id, e.succeeded(id))
	}
	for _, v := range created {
		ctx, cancel := conn.WithTimeout(e.ctx)
		_, err := conn.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v})
		cancel()
		if err != nil {
			t.Errorf("DeleteVolume %s: %v", v, err)
		}
	}
	created = nil
	ctx, cancel := conn.WithTimeout(e.ctx)
	defer cancel()
	rsp, err := conn.Controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rsp.GetEntries()); n != 0 {
		t.Errorf("%d volumes left on the backend: %v", n, rsp.GetEntries())
	}
	// No sidecar needed a right beyond deploy/'s, nor the agent one beyond its node's (the
	// Node authorizer's lag on a pod just bound aside).
	framework.CheckNoForbidden(t, framework.NodeAuthorizerLag, e.procs...)
}

// waitMigrationTarget labels the Node with its cloud topology and waits until the agent has
// registered the driver with its zone, and the CSINode lists the migrated plugins.
func (e *env) waitMigrationTarget(tg migrationTarget) {
	e.t.Helper()
	e.poll("Node "+e.node, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
		return err == nil, nil
	})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": tg.nodeLabels}})
	if _, err := e.cs.CoreV1().Nodes().Patch(e.ctx, e.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.poll("driver "+tg.driver+" in CSINode "+e.node+" with the migrated plugins", func(ctx context.Context) (bool, error) {
		cn, err := e.cs.StorageV1().CSINodes().Get(ctx, e.node, metav1.GetOptions{})
		if err != nil || cn.Annotations[migration.MigratedPluginsAnnotation] != migration.MigratedPlugins() {
			return false, nil
		}
		return slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool {
			return d.Name == tg.driver && slices.Equal(d.TopologyKeys, slices.Sorted(slices.Values([]string{tg.zoneKey, driver.TopologyKey})))
		}), nil
	})
	cn, err := e.cs.StorageV1().CSINodes().Get(e.ctx, e.node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if !strings.Contains(cn.Annotations[migration.MigratedPluginsAnnotation], tg.inTree) {
		e.t.Errorf("CSINode %s lists migrated plugins %q, without %s", e.node, cn.Annotations[migration.MigratedPluginsAnnotation], tg.inTree)
	}
}

// checkAttached waits until the VolumeAttachment is attached and checks it with cond.
func (e *env) checkAttached(name string, cond func(*storagev1.VolumeAttachment) bool) {
	e.t.Helper()
	var va *storagev1.VolumeAttachment
	e.poll("VolumeAttachment "+name+" attached", func(ctx context.Context) (bool, error) {
		var err error
		va, err = e.cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		return err == nil && va.Status.Attached, nil
	})
	if cond != nil && !cond(va) {
		e.t.Errorf("VolumeAttachment %s: source %+v", name, va.Spec.Source)
	}
	if !slices.Contains(va.Finalizers, "external-attacher/"+csiclient.SanitizeDriverName(va.Spec.Attacher)) {
		e.t.Errorf("VolumeAttachment %s has finalizers %v, want external-attacher's", name, va.Finalizers)
	}
}

// migratedMount checks that a pod's migrated volume is mounted where the kubelet mounts it,
// pods/<uid>/volumes/kubernetes.io~csi/<spec name>/mount, with vol_data.json naming the
// driver and the translated handle, and returns the mount.
func (e *env) migratedMount(uid types.UID, specName, handle string, tg migrationTarget) string {
	e.t.Helper()
	dir := volume.Paths{Root: e.root}.PodVolumeDir(uid, csiplugin.PluginName, specName)
	target := filepath.Join(dir, "mount")
	if !isMountPoint(target) {
		e.t.Fatalf("%s is not a mount point; mounts: %v", target, kubecheck.MountsUnder(e.root))
	}
	var data map[string]string
	raw, err := os.ReadFile(filepath.Join(dir, "vol_data.json"))
	if err == nil {
		err = json.Unmarshal(raw, &data)
	}
	if err != nil || data["driverName"] != tg.driver || data["volumeHandle"] != handle || data["specVolumeID"] != specName {
		e.t.Errorf("vol_data.json of %s: %v (%v), want driver %s, handle %s, spec %s", dir, data, err, tg.driver, handle, specName)
	}
	return target
}

// createVolume makes a volume on this node through CreateVolume, as an old cluster's
// volume that in-tree PVs and pods name.
func (e *env) createVolume(conn *csiclient.Conn, name string, tg migrationTarget) string {
	e.t.Helper()
	ctx, cancel := conn.WithTimeout(e.ctx)
	defer cancel()
	rsp, err := conn.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:          name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20},
		Parameters:    map[string]string{driver.ParamType: "dir"},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{driver.TopologyKey: e.node, tg.zoneKey: tg.zone}}}},
	})
	if err != nil {
		e.t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return rsp.GetVolume().GetVolumeId()
}

// staticPV creates a PV of the source for the claim "static" of the test's namespace, kept
// to this node, with the Retain policy; it is deleted when the test ends.
func (e *env) staticPV(name string, src corev1.PersistentVolumeSource) string {
	e.t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource:        src,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: e.ns, Name: "static"},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{e.node}}},
			}}}},
		},
	}
	if _, err := e.cs.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.cs.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}
