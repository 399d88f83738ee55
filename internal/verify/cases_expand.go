package verify

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

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

// sizeBefore is the filesystem seen through a claim's mount before it grows, and why that
// filesystem's size is not the volume's own ("" when it is).
type sizeBefore struct {
	fsView
	notOwn string
}

// useClaimToGrow gives pod a claim "data" of fsSizeBefore, with a proof written, and returns
// the filesystem seen through its mount (zero where the mount is not on this host).
func (k *caseEnv) useClaimToGrow(pod string) (*inUse, sizeBefore, error) {
	u, err := k.useClaim("data", classFS, fsSizeBefore, pod)
	if err != nil || u.dir == "" {
		return u, sizeBefore{}, err
	}
	v, why, err := k.observe(u.dir, "data")
	return u, sizeBefore{v, why}, err
}

// grown checks, once the claim's status shows the expansion, that the data survived it and
// that the filesystem at dir grew with it; a filesystem that is not the volume's own cannot
// show that, which makes the size check not applicable rather than failed.
func grown(dir string, before sizeBefore, want string) error {
	if err := readProof(dir, want); err != nil {
		return err
	}
	if before.notOwn != "" {
		return unobservable("the claim's status shows the expansion (capacity "+fsSizeAfter+", no resize status or condition left) and its data is intact", before.notOwn)
	}
	after, err := fsSize(dir)
	if err != nil {
		return err
	}
	return checkGrowth(before.size, after)
}

// checkGrowth compares the sizes of filesystems of the volume's own around an expansion.
func checkGrowth(before, after int64) error {
	if after >= before+growth {
		return nil
	}
	return fmt.Errorf("filesystem inside the mount is %d bytes after the expansion, %d before", after, before)
}

// waitAllocated waits until Kubernetes took the expansion in hand: the PV grew, or the claim
// waits for the node (offline node expansion).
func (k *caseEnv) waitAllocated(claim, size string) error {
	want := mustQuantity(size)
	return kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
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
