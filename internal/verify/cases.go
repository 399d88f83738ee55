package verify

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/kubecheck"
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
	return append([]*testCase{
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
		{name: "access/shared", host: true, run: sharedClaim},
		{name: "access/fsgroup-policy", host: true, applies: fsGroupApplies, run: fsGroupPolicy},
		{name: "data/large-files", host: true, run: largeFiles},
		{name: "multi/volumes", host: true, run: multiVolume},
		{name: "pv/fields", run: pvFields},
		{name: "subpath", host: true, applies: subPathApplies, run: subPaths},
		{name: "capacity/objects", applies: capacityApplies, run: capacityObjects},
		{name: "ephemeral/inline-separate", host: true, applies: inlineApplies, run: inlineSeparate},
		{name: "ephemeral/generic-block", run: genericBlock},
		{name: "ephemeral/generic-expand", host: true, applies: onlineApplies, run: genericExpand},
		{name: "snapshot/overwrite", host: true, applies: snapshotApplies, run: snapshotOverwrite},
		{name: "snapshot/retain-import", applies: snapshotApplies, run: snapshotRetainImport},
		{name: "snapshot/restore-larger", host: true, applies: snapshotApplies, run: restoreLarger},
		{name: "clone/larger", host: true, applies: cloneApplies, run: cloneLarger},
		{name: "crash/node-agent", host: true, phase: phaseAlone, run: killNodeAgent},
		{name: "limits/volumes", phase: phaseAlone, run: volumeLimits},
		{name: "limits/refresh", phase: phaseAlone, applies: refreshApplies, run: allocatableRefresh},
		{name: "crash/deleted-while-down", host: true, phase: phaseAlone, run: deletedWhileDown},
		{name: "crash/driver-restart", phase: phaseAlone, applies: restartApplies, run: restartDriver},
		{name: "access/rwop-node", run: readWriteOncePodOnNode},
		{name: "selinux/mount", host: true, applies: seLinuxApplies, run: seLinuxMount},
		{name: "topology/pinned-away", run: pinnedAway},
		{name: "multinode/rwo-move", host: true, run: rwoMove},
		{name: "multinode/rwx", host: true, run: rwxNodes},
		{name: "multinode/out-of-service", host: true, phase: phaseAlone, run: lostNode},
		{name: "leftovers", phase: phaseLast, run: leftovers},
		groupSnapshotCase(),
	}, modifyCases()...)
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
	u := &inUse{vols: []corev1.Volume{kubecheck.ClaimVolume("data", claim)}}
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
