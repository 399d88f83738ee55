package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/mount-utils"
)

type phase int

const (
	phaseShared phase = iota // runs beside other cases
	phaseAlone               // disrupts the node or the driver: runs alone
	phaseLast                // the leftover check
)

type testCase struct {
	name string
	// host: the case reads through the node's mount paths or acts on its processes.
	host  bool
	phase phase
	// applies says why the driver or cluster does not allow the case, or "".
	applies func(e *env) string
	run     func(k *caseEnv) error
}

func allCases() []*testCase {
	return []*testCase{
		{name: "provision/immediate", run: provisionImmediate},
		{name: "provision/wffc", run: provisionWFFC},
		{name: "data/persist", host: true, run: dataPersists},
		{name: "access/rwop", run: readWriteOncePod},
		{name: "access/readonly", host: true, run: readOnly},
		{name: "access/fsgroup", host: true, applies: fsGroupApplies, run: fsGroup},
		{name: "block/raw", run: rawBlock},
		{name: "ephemeral/inline", applies: inlineApplies, run: inlineEphemeral},
		{name: "ephemeral/generic", run: genericEphemeral},
		{name: "attach/detach", applies: attachApplies, run: attachDetach},
		{name: "expand/offline", applies: offlineApplies, run: expandOffline},
		{name: "expand/online", applies: onlineApplies, run: expandOnline},
		{name: "expand/online-block", applies: onlineApplies, run: expandOnlineBlock},
		{name: "snapshot/restore", applies: snapshotApplies, run: snapshotRestore},
		{name: "clone", applies: cloneApplies, run: clone},
		{name: "reclaim/delete", run: reclaimDelete},
		{name: "reclaim/retain", run: reclaimRetain},
		{name: "crash/node-agent", host: true, phase: phaseAlone, run: killNodeAgent},
		{name: "crash/driver-restart", phase: phaseAlone, applies: restartApplies, run: restartDriver},
		{name: "leftovers", phase: phaseLast, run: leftovers},
		groupSnapshotCase(),
	}
}

// provisionImmediate: Immediate binding, restricted to the node's topology segment; the PV
// must carry the segment as node affinity.
func provisionImmediate(k *caseEnv) error {
	if _, err := k.fsClaim("data", classImmediate); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	if err := k.checkTopology(pv); err != nil {
		return err
	}
	return k.deleteClaim("data")
}

// provisionWFFC: WaitForFirstConsumer binding: the claim stays Pending until a pod uses it,
// then is provisioned on the pod's node.
func provisionWFFC(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	time.Sleep(time.Second) // a wrong Immediate provisioning would bind now
	pvc, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(k.ctx, "data", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pvc.Status.Phase != corev1.ClaimPending {
		return fmt.Errorf("WaitForFirstConsumer claim is %s before any pod uses it", pvc.Status.Phase)
	}
	if _, err := k.runPod("app", []corev1.Volume{claimVolume("data", "data")}, nil, nil); err != nil {
		return err
	}
	pvc, err = k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(k.ctx, "data", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if got := pvc.Annotations["volume.kubernetes.io/selected-node"]; got != k.node {
		return fmt.Errorf("claim's selected-node annotation = %q, want %q", got, k.node)
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	if err := k.checkTopology(pv); err != nil {
		return err
	}
	if err := k.deletePod("app"); err != nil {
		return err
	}
	return k.deleteClaim("data")
}

// checkTopology: a driver with topology keys must give the PV the node's segment.
func (k *caseEnv) checkTopology(pv *corev1.PersistentVolume) error {
	if len(k.topology) == 0 {
		return nil
	}
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return fmt.Errorf("PV %s has no node affinity; the driver reports topology %v", pv.Name, k.topology)
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		ok := true
		for key, val := range k.topology {
			found := false
			for _, ex := range term.MatchExpressions {
				if ex.Key == key && ex.Operator == corev1.NodeSelectorOpIn && slices.Contains(ex.Values, val) {
					found = true
				}
			}
			ok = ok && found
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("PV %s node affinity %v does not select the node's topology %v", pv.Name, pv.Spec.NodeAffinity.Required.NodeSelectorTerms, k.topology)
}

// dataPersists: data written through one pod's mount is read back by the next pod.
func dataPersists(k *caseEnv) error {
	u, err := k.useClaim("data", classWFFC, defaultSize, "writer")
	if err != nil {
		return err
	}
	if err := k.deletePod("writer"); err != nil {
		return err
	}
	if isMountPoint(u.dir) {
		return fmt.Errorf("%s is still mounted after its pod was deleted", u.dir)
	}
	return k.reuse(u, "data", "reader")
}

// inUse is a claim mounted in a pod; on this host, dir is the pod's mount path and want
// the proof written through it (both "" elsewhere).
type inUse struct {
	vols      []corev1.Volume
	pod       *corev1.Pod
	dir, want string
}

// useClaim makes a filesystem claim of class and size, mounts it in pod, and writes the
// proof through the mount path when this is the node's host.
func (k *caseEnv) useClaim(claim, class, size, pod string) (*inUse, error) {
	if _, err := k.claim(claim, class, size, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce, nil); err != nil {
		return nil, err
	}
	u := &inUse{vols: []corev1.Volume{claimVolume("data", claim)}}
	var err error
	if u.pod, err = k.runPod(pod, u.vols, nil, nil); err != nil {
		return nil, err
	}
	if k.root == "" {
		return u, nil
	}
	if u.dir, err = k.claimPath(u.pod, claim); err != nil {
		return nil, err
	}
	u.want, err = k.writeProof(u.dir)
	return u, err
}

// reuse mounts the claim in a new pod and reads the proof back through its mount path.
func (k *caseEnv) reuse(u *inUse, claim, pod string) error {
	p, err := k.runPod(pod, u.vols, nil, nil)
	if err != nil || k.root == "" {
		return err
	}
	dir, err := k.claimPath(p, claim)
	if err != nil {
		return err
	}
	return readProof(dir, u.want)
}

// readWriteOncePod: a second pod of a ReadWriteOncePod claim is not scheduled while the
// first uses it, and gets the volume once the first is gone.
func readWriteOncePod(k *caseEnv) error {
	if _, err := k.claim("data", classWFFC, defaultSize, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOncePod, nil); err != nil {
		return err
	}
	vols := []corev1.Volume{claimVolume("data", "data")}
	if _, err := k.runPod("first", vols, nil, nil); err != nil {
		return err
	}
	second, err := k.pod("second", vols, nil, nil)
	if err != nil {
		return err
	}
	err = poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		p, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, second.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("the second pod of a ReadWriteOncePod claim was scheduled to %s while the first uses it", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if err := k.deletePod("first"); err != nil {
		return err
	}
	_, err = k.ready(second)
	return err
}

// readOnly: a claim mounted readOnly refuses writes in the pod's mount.
func readOnly(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	v := claimVolume("data", "data")
	v.PersistentVolumeClaim.ReadOnly = true
	p, err := k.runPod("app", []corev1.Volume{v}, nil, nil)
	if err != nil {
		return err
	}
	dir, err := k.claimPath(p, "data")
	if err != nil {
		return err
	}
	err = os.WriteFile(filepath.Join(dir, "must-fail"), []byte("x"), 0o644)
	if err == nil {
		return fmt.Errorf("wrote into %s, a readOnly volume", dir)
	}
	if !errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("writing into the readOnly volume failed with %v, want EROFS", err)
	}
	return nil
}

func fsGroupApplies(e *env) string {
	p := e.csiDriver.Spec.FSGroupPolicy
	if p != nil && *p == storagev1.NoneFSGroupPolicy {
		return "CSIDriver fsGroupPolicy is None: the node leaves ownership to the driver"
	}
	return ""
}

// fsGroup: the pod's fsGroup owns the volume's root, with the setgid bit, as the kubelet
// applies it (fsGroupPolicy File, or ReadWriteOnceWithFSType for an RWO filesystem).
func fsGroup(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	const gid = 4321
	p, err := k.runPod("app", []corev1.Volume{claimVolume("data", "data")}, nil, func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr(int64(gid))}
	})
	if err != nil {
		return err
	}
	dir, err := k.claimPath(p, "data")
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	if st.Gid != gid || st.Mode&unix.S_ISGID == 0 {
		return fmt.Errorf("volume root %s has gid %d, mode %o; want gid %d with setgid", dir, st.Gid, st.Mode&0o7777, gid)
	}
	return nil
}

// blockPod runs a pod that maps a raw block claim. CSI has no capability for raw block: a
// driver without it refuses the claim with InvalidArgument. The case is then not applicable
// if a filesystem claim of the same class works, and fails otherwise (a bad parameter, say).
func (k *caseEnv) blockPod(name, claim string) (*corev1.Pod, error) {
	p, err := k.pod(name, nil, []corev1.Volume{claimVolume(claim, claim)}, nil)
	if err != nil {
		return nil, err
	}
	var refused string
	err = poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		cur, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil && podCondition(cur, volumesReady) == corev1.ConditionTrue {
			p = cur
			return true, nil
		}
		evs, err := k.cs.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim + ",reason=ProvisioningFailed"})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, "InvalidArgument") {
				refused = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("volumes of pod %s not ready: %w", name, err)
	}
	if refused == "" {
		return p, nil
	}
	if err := k.deletePod(name); err != nil {
		return nil, err
	}
	if _, err := k.fsClaim("probe", classBlock); err != nil {
		return nil, err
	}
	if _, err := k.runPod("probe", []corev1.Volume{claimVolume("probe", "probe")}, nil, nil); err != nil {
		return nil, fmt.Errorf("the raw block claim was refused: %s", refused)
	}
	return nil, skip("the driver refuses raw block (a filesystem claim of the same class works): %s", refused)
}

// rawBlock: a volumeMode Block claim is mapped into the pod as a device; bytes written
// through it are read back by the next pod.
func rawBlock(k *caseEnv) error {
	if _, err := k.claim("dev", classBlock, defaultSize, corev1.PersistentVolumeBlock, corev1.ReadWriteOnce, nil); err != nil {
		return err
	}
	p1, err := k.blockPod("writer", "dev")
	if err != nil {
		return err
	}
	if k.root == "" {
		return nil
	}
	pv, err := k.boundPV("dev")
	if err != nil {
		return err
	}
	want := bytes.Repeat([]byte("kubevol verify "+k.ns+" "), 64)
	if err := writeDevice(k.devicePath(p1, pv.Name), want); err != nil {
		return err
	}
	if err := k.deletePod("writer"); err != nil {
		return err
	}
	p2, err := k.runPod("reader", nil, []corev1.Volume{claimVolume("dev", "dev")}, nil)
	if err != nil {
		return err
	}
	got := make([]byte, len(want))
	f, err := os.Open(k.devicePath(p2, pv.Name))
	if err != nil {
		return fmt.Errorf("open the pod's device: %w", err)
	}
	defer f.Close()
	if _, err := io.ReadFull(f, got); err != nil {
		return fmt.Errorf("read the pod's device: %w", err)
	}
	if !bytes.Equal(got, want) {
		return errors.New("the next pod's device does not hold the bytes the first wrote")
	}
	return nil
}

func writeDevice(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open the pod's device: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write the pod's device: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func inlineApplies(e *env) string {
	if !slices.Contains(e.csiDriver.Spec.VolumeLifecycleModes, storagev1.VolumeLifecycleEphemeral) {
		return "CSIDriver volumeLifecycleModes has no Ephemeral"
	}
	return ""
}

// inlineEphemeral: a CSI volume inline in the pod (the StorageClass parameters as its
// attributes) is mounted with the pod and removed with it.
func inlineEphemeral(k *caseEnv) error {
	attrs := map[string]string{}
	if k.base != nil {
		for key, v := range k.base.Parameters {
			if !strings.HasPrefix(key, "csi.storage.k8s.io/") {
				attrs[key] = v
			}
		}
	}
	v := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: k.driver, VolumeAttributes: attrs}}}
	p, err := k.runPod("app", []corev1.Volume{v}, nil, nil)
	if err != nil {
		return err
	}
	if k.root == "" {
		return nil
	}
	dir := k.mountPath(p, "scratch")
	want, err := k.writeProof(dir)
	if err != nil {
		return err
	}
	if err := readProof(dir, want); err != nil {
		return err
	}
	if err := k.deletePod("app"); err != nil {
		return err
	}
	if isMountPoint(dir) {
		return fmt.Errorf("inline volume still mounted at %s after its pod was deleted", dir)
	}
	return nil
}

// genericEphemeral: a claim made from the pod's template is provisioned, mounted, and
// deleted with the pod (owner reference, garbage collector), and its PV with it.
func genericEphemeral(k *caseEnv) error {
	class := k.classes[classWFFC]
	v := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mustQuantity(defaultSize)}},
		}},
	}}}
	p, err := k.runPod("app", []corev1.Volume{v}, nil, nil)
	if err != nil {
		return err
	}
	claim := p.Name + "-" + v.Name
	pv, err := k.boundPV(claim)
	if err != nil {
		return err
	}
	if k.root != "" {
		dir := k.mountPath(p, pv.Name)
		if _, err := k.writeProof(dir); err != nil {
			return err
		}
	}
	if err := k.deletePod("app"); err != nil {
		return err
	}
	if err := k.waitPVGone(pv.Name); err != nil {
		return fmt.Errorf("the pod's ephemeral claim was not deleted with it: %w", err)
	}
	return nil
}

func attachApplies(e *env) string {
	if !e.attachRequired() {
		return "CSIDriver attachRequired is false"
	}
	if r := e.lacks(csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME); r != "" {
		return r + " (attach is trivial)"
	}
	return ""
}

// attachDetach: the pod's volume gets an attached VolumeAttachment for its node before it
// is mounted, and the attachment goes once the pod is gone.
func attachDetach(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	if _, err := k.runPod("app", []corev1.Volume{claimVolume("data", "data")}, nil, nil); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	va, err := k.attachment(pv.Name)
	if err != nil {
		return err
	}
	if va == nil || !va.Status.Attached {
		return fmt.Errorf("no attached VolumeAttachment for PV %s on node %s while its pod is ready", pv.Name, k.node)
	}
	if err := k.deletePod("app"); err != nil {
		return err
	}
	var last *storagev1.VolumeAttachment
	err = poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		last, err = k.attachment(pv.Name)
		return err == nil && last == nil, nil
	})
	if err != nil {
		detail := ""
		if last != nil && last.Status.DetachError != nil {
			detail = ": " + last.Status.DetachError.Message
		}
		return fmt.Errorf("VolumeAttachment of PV %s not removed after its pod was deleted%s", pv.Name, detail)
	}
	return nil
}

func (k *caseEnv) attachment(pv string) (*storagev1.VolumeAttachment, error) {
	list, err := k.cs.StorageV1().VolumeAttachments().List(k.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, va := range list.Items {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv && va.Spec.NodeName == k.node {
			return &va, nil
		}
	}
	return nil, nil
}

// expandable is why the driver cannot expand at all, or "".
func expandable(e *env) string {
	if !e.has(csi.ControllerServiceCapability_RPC_EXPAND_VOLUME) && !e.hasNode(csi.NodeServiceCapability_RPC_EXPAND_VOLUME) {
		return "the driver advertises neither controller nor node EXPAND_VOLUME"
	}
	return ""
}

func offlineApplies(e *env) string {
	return expansionApplies(e, e.caps.online, e.caps.offline, "ONLINE")
}
func onlineApplies(e *env) string {
	return expansionApplies(e, e.caps.offline, e.caps.online, "OFFLINE")
}

// expansionApplies rules an expansion case out for a driver that cannot expand, or that
// advertises only the other mode (other without this one).
func expansionApplies(e *env, other, this bool, otherName string) string {
	if r := expandable(e); r != "" {
		return r
	}
	if other && !this {
		return "the driver advertises " + otherName + " volume expansion only"
	}
	return ""
}

// Sizes of the filesystem expansion cases: xfs needs 300 MiB.
const (
	fsSizeBefore = "300Mi"
	fsSizeAfter  = "600Mi"
	growth       = 250 << 20
)

// expandOffline: a claim grown while no pod uses it; the next pod sees the bigger
// filesystem (xfs: ext4 cannot grow while mounted without CAP_SYS_RESOURCE) with the data.
func expandOffline(k *caseEnv) error {
	u, before, err := k.useClaimToGrow("before")
	if err != nil {
		return err
	}
	if err := k.deletePod("before"); err != nil {
		return err
	}
	if err := k.expand("data", fsSizeAfter); err != nil {
		return err
	}
	// The controller's share (if any) happens now; the node's when the next pod mounts.
	if err := k.waitAllocated("data", fsSizeAfter); err != nil {
		return err
	}
	p2, err := k.runPod("after", u.vols, nil, nil)
	if err != nil {
		return err
	}
	if err := k.waitCapacity("data", fsSizeAfter); err != nil {
		return err
	}
	if k.root == "" {
		return nil
	}
	dir, err := k.claimPath(p2, "data")
	if err != nil {
		return err
	}
	return grown(dir, before, u.want)
}

// useClaimToGrow gives pod a claim "data" of fsSizeBefore, with a proof written, and returns
// the size of the filesystem seen through its mount (0 where the mount is not on this host).
func (k *caseEnv) useClaimToGrow(pod string) (*inUse, int64, error) {
	u, err := k.useClaim("data", classFS, fsSizeBefore, pod)
	if err != nil || u.dir == "" {
		return u, 0, err
	}
	before, err := fsSize(u.dir)
	return u, before, err
}

// grown checks that the filesystem at dir grew by the expansion and kept the proof.
func grown(dir string, before int64, want string) error {
	after, err := fsSize(dir)
	if err != nil {
		return err
	}
	if err := checkGrowth(before, after); err != nil {
		return err
	}
	return readProof(dir, want)
}

// checkGrowth compares the filesystem sizes around an expansion. A filesystem far larger than
// the claim is not the volume's own but the one its directory lives on (a driver's
// directory volumes, as kubevol's own type=dir): say how to get a device instead.
func checkGrowth(before, after int64) error {
	if after >= before+growth {
		return nil
	}
	err := fmt.Errorf("filesystem inside the mount is %d bytes after the expansion, %d before", after, before)
	if claim := mustQuantity(fsSizeBefore); before > 4*claim.Value() {
		err = fmt.Errorf("%w; a filesystem that size for a claim of %s is not the volume's own (a directory on a shared filesystem?): give --block-parameters the StorageClass parameters that make the driver offer a device", err, fsSizeBefore)
	}
	return err
}

// waitAllocated waits until Kubernetes took the expansion in hand: the PV grew, or the claim
// waits for the node (offline node expansion).
func (k *caseEnv) waitAllocated(claim, size string) error {
	want := mustQuantity(size)
	return poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		pvc, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range pvc.Status.Conditions {
			if c.Type == corev1.PersistentVolumeClaimFileSystemResizePending {
				return true, nil
			}
		}
		pv, err := k.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got := pv.Spec.Capacity[corev1.ResourceStorage]
		return got.Cmp(want) >= 0, nil
	})
}

// expandOnline: a claim grown while its pod uses it; the filesystem grows inside the live
// mount.
func expandOnline(k *caseEnv) error {
	u, before, err := k.useClaimToGrow("app")
	if err != nil {
		return err
	}
	if err := k.expand("data", fsSizeAfter); err != nil {
		return err
	}
	if err := k.waitCapacity("data", fsSizeAfter); err != nil {
		return err
	}
	if u.dir == "" {
		return nil
	}
	return grown(u.dir, before, u.want)
}

// expandOnlineBlock: a raw block claim grown while its pod uses the device; the device the
// pod sees grows.
func expandOnlineBlock(k *caseEnv) error {
	if _, err := k.claim("dev", classBlock, "16Mi", corev1.PersistentVolumeBlock, corev1.ReadWriteOnce, nil); err != nil {
		return err
	}
	p, err := k.blockPod("app", "dev")
	if err != nil {
		return err
	}
	if err := k.expand("dev", "32Mi"); err != nil {
		return err
	}
	if err := k.waitCapacity("dev", "32Mi"); err != nil {
		return err
	}
	if k.root == "" {
		return nil
	}
	pv, err := k.boundPV("dev")
	if err != nil {
		return err
	}
	size, err := deviceSize(k.devicePath(p, pv.Name))
	if err != nil {
		return err
	}
	if size < 32<<20 {
		return fmt.Errorf("the pod's device has %d bytes after the expansion, want %d", size, 32<<20)
	}
	return nil
}

func snapshotApplies(e *env) string {
	if r := e.lacks(csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT); r != "" {
		return r
	}
	if !e.snapshotsServed() {
		return "no snapshotter running: the cluster does not serve snapshot.storage.k8s.io/v1 VolumeSnapshots"
	}
	return ""
}

// snapshotRestore: a VolumeSnapshot of a claim is restored into a new claim that holds the
// data.
func snapshotRestore(k *caseEnv) error {
	want, err := k.filledClaim("source")
	if err != nil {
		return err
	}
	if err := k.snapshot("snap", "source"); err != nil {
		return err
	}
	return k.checkCopy("restored", &corev1.TypedLocalObjectReference{APIGroup: ptr(snapshotGVR.Group), Kind: "VolumeSnapshot", Name: "snap"}, want)
}

func cloneApplies(e *env) string { return e.lacks(csi.ControllerServiceCapability_RPC_CLONE_VOLUME) }

// clone: a claim with another claim as data source holds its data.
func clone(k *caseEnv) error {
	want, err := k.filledClaim("source")
	if err != nil {
		return err
	}
	return k.checkCopy("copy", &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "source"}, want)
}

// filledClaim makes a claim, writes the proof into it through a pod (on this host), and
// deletes the pod, so the data is at rest for a snapshot or a clone.
func (k *caseEnv) filledClaim(name string) (string, error) {
	u, err := k.useClaim(name, classWFFC, defaultSize, "writer")
	if err != nil {
		return "", err
	}
	return u.want, k.deletePod("writer")
}

// checkCopy makes a claim from a source, mounts it and reads the source's proof from it.
func (k *caseEnv) checkCopy(claim string, src *corev1.TypedLocalObjectReference, want string) error {
	if _, err := k.claim(claim, classWFFC, defaultSize, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce, src); err != nil {
		return err
	}
	return k.reuse(&inUse{vols: []corev1.Volume{claimVolume("data", claim)}, want: want}, claim, "reader")
}

// reclaimDelete: deleting the claim of a Delete class deletes the PV and, through the
// driver, the volume (not listed any more, when the driver can list).
func reclaimDelete(k *caseEnv) error {
	if _, err := k.fsClaim("data", classImmediate); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	if err := k.deleteClaim("data"); err != nil {
		return err
	}
	return k.checkListed(pv.Spec.CSI.VolumeHandle, false)
}

// reclaimRetain: the PV of a Retain class outlives its claim, Released, with its volume;
// verify then deletes it through the provisioner and the driver so nothing is left.
func reclaimRetain(k *caseEnv) error {
	if _, err := k.fsClaim("data", classRetain); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	if err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Delete(k.ctx, "data", metav1.DeleteOptions{}); err != nil {
		return err
	}
	err = poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		cur, err := k.cs.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("the PV of a Retain claim was deleted with the claim")
		}
		return err == nil && cur.Status.Phase == corev1.VolumeReleased, nil
	})
	if err != nil {
		return err
	}
	if err := k.checkListed(pv.Spec.CSI.VolumeHandle, true); err != nil {
		return err
	}
	if err := k.deleteRetained(pv.Name); err != nil {
		return err
	}
	if err := k.waitPVGone(pv.Name); err != nil {
		return fmt.Errorf("the released PV, switched to Delete, was not deleted: %w", err)
	}
	return k.checkListed(pv.Spec.CSI.VolumeHandle, false)
}

// checkListed checks ListVolumes (when the driver offers it) for a volume.
func (k *caseEnv) checkListed(handle string, want bool) error {
	if k.conn == nil || !k.caps.controller[csi.ControllerServiceCapability_RPC_LIST_VOLUMES] {
		return nil
	}
	vols, err := k.listVolumes(k.ctx)
	if err != nil {
		return fmt.Errorf("ListVolumes: %w", err)
	}
	if vols[handle] != want {
		if want {
			return fmt.Errorf("ListVolumes does not list volume %s, which its Released PV retains", handle)
		}
		return fmt.Errorf("ListVolumes still lists volume %s after its PV was deleted", handle)
	}
	return nil
}

// killNodeAgent: kill -9 of the node agent while a volume is mounted. kubevol up restarts
// it; the new agent reconstructs the mount from disk, keeps the data in place and tears the
// volume down cleanly when the pod goes.
func killNodeAgent(k *caseEnv) error {
	u, err := k.useClaim("data", classWFFC, defaultSize, "app")
	if err != nil {
		return err
	}
	old, err := nodeAgentPID(k.root)
	if err != nil {
		return err
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 node agent %d: %w", old, err)
	}
	var pid int
	err = poll(k.ctx, time.Minute, func(context.Context) (bool, error) {
		pid, _ = nodeAgentPID(k.root)
		return pid != 0 && pid != old, nil
	})
	if err != nil {
		return fmt.Errorf("no node agent came back within a minute of kill -9 (does kubevol up supervise it?)")
	}
	if !isMountPoint(u.dir) {
		return fmt.Errorf("%s is no longer mounted after the node agent restarted", u.dir)
	}
	if err := readProof(u.dir, u.want); err != nil {
		return err
	}
	if err := k.deletePod("app"); err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	if isMountPoint(u.dir) {
		return fmt.Errorf("the restarted node agent left %s mounted after the pod was deleted", u.dir)
	}
	return k.reuse(u, "data", "again")
}

// nodeAgentPID finds the `kubevol node` process serving root: the one whose --root-dir is
// root, never another agent's.
func nodeAgentPID(root string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, ent := range entries {
		var pid int
		if _, err := fmt.Sscanf(ent.Name(), "%d", &pid); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) < 2 || args[1] != "node" {
			continue
		}
		for i, a := range args {
			if (a == "--root-dir" && i+1 < len(args) && args[i+1] == root) || a == "--root-dir="+root {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no kubevol node process with --root-dir %s on this machine", root)
}

func restartApplies(e *env) string {
	if e.o.RestartDriver == "" {
		return "verify was not told how to restart the driver (--restart-driver CMD)"
	}
	return ""
}

// restartDriver: the driver restarts (the given command) while a volume is published; the
// data stays reachable, the pod's teardown and the next mount work against the new driver.
func restartDriver(k *caseEnv) error {
	u, err := k.useClaim("data", classWFFC, defaultSize, "app")
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(k.ctx, "/bin/sh", "-c", k.o.RestartDriver).CombinedOutput()
	if err != nil {
		return fmt.Errorf("--restart-driver: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if k.conn != nil {
		pctx, cancel := context.WithTimeout(k.ctx, time.Minute)
		err := k.conn.ProbeForever(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("the driver did not answer Probe ready after the restart: %w", err)
		}
	}
	if u.dir != "" {
		if err := readProof(u.dir, u.want); err != nil {
			return fmt.Errorf("after the driver restart: %w", err)
		}
	}
	if err := k.deletePod("app"); err != nil {
		return fmt.Errorf("after the driver restart: %w", err)
	}
	return k.reuse(u, "data", "again")
}

// leftovers: after every case, nothing of the run is left: no namespace, no PV, no
// VolumeAttachment, no mount of its pods, and (ListVolumes) no volume that was not there
// before.
func leftovers(k *caseEnv) error {
	sel := metav1.ListOptions{LabelSelector: runLabel + "=" + k.runID}
	var left []string
	err := poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		left = nil
		nss, err := k.cs.CoreV1().Namespaces().List(ctx, sel)
		if err != nil {
			return false, nil
		}
		for _, ns := range nss.Items {
			if ns.Name != k.ns {
				left = append(left, "namespace "+ns.Name)
			}
		}
		pvs, err := k.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		mine := map[string]bool{}
		for _, name := range k.classes {
			mine[name] = true
		}
		for _, pv := range pvs.Items {
			if mine[pv.Spec.StorageClassName] {
				left = append(left, "PV "+pv.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("left behind: %s", strings.Join(left, ", "))
	}
	if k.root != "" {
		if mounts := k.runMounts(); len(mounts) > 0 {
			return fmt.Errorf("left mounted: %s", strings.Join(mounts, ", "))
		}
	}
	if k.volumesBefore != nil {
		now, err := k.listVolumes(k.ctx)
		if err != nil {
			return fmt.Errorf("ListVolumes: %w", err)
		}
		var extra []string
		for id := range now {
			if !k.volumesBefore[id] {
				extra = append(extra, id)
			}
		}
		if len(extra) > 0 {
			slices.Sort(extra)
			return fmt.Errorf("the driver still lists volumes the run created: %s", strings.Join(extra, ", "))
		}
	}
	return nil
}

// runMounts lists the mounts left under the pod directories of the run's pods.
func (k *caseEnv) runMounts() []string {
	mps, err := mount.New("").List()
	if err != nil {
		return []string{"cannot read the mount table: " + err.Error()}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, mp := range mps {
		for _, uid := range k.uids {
			if strings.HasPrefix(mp.Path, filepath.Join(k.root, "pods", string(uid))+"/") {
				out = append(out, mp.Path)
			}
		}
	}
	return out
}

func isMountPoint(path string) bool {
	notMnt, err := mount.New("").IsLikelyNotMountPoint(path)
	return err == nil && !notMnt
}

func fsSize(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Blocks) * st.Bsize, nil
}

func deviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, io.SeekEnd)
}
