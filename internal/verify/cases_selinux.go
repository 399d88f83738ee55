package verify

import (
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// SELinux context mounts (KEP-1710): for a driver whose CSIDriver says seLinuxMount: true,
// the node stages and publishes a ReadWriteOncePod volume of a pod with an SELinux level
// with the mount flag context="<label>" (every access mode from SELinuxMount, GA in 1.37;
// ReadWriteOncePod since 1.28), so the runtime need not relabel the files. The driver must
// mount the volume's filesystem with it: the kernel then shows the context among the
// superblock's options of the pod's mount, which is what the case reads, for any driver.
// Without SELinux on the host neither the node (as the kubelet) chooses a context nor could
// the kernel show one.

// seLinuxLevel is the level of the case's pod, seLinuxLabel the file label the node derives
// from it (the container policy's user, role and type).
const (
	seLinuxLevel = "s0:c123,c456"
	seLinuxLabel = "system_u:object_r:container_file_t:" + seLinuxLevel
)

// seLinuxEnforceFile is selinuxfs's, present on a host that runs SELinux (enforcing or
// permissive): the kubelet's test for an SELinux host.
var seLinuxEnforceFile = "/sys/fs/selinux/enforce"

func seLinuxApplies(e *env) string {
	if d := e.csiDriver.Spec.SELinuxMount; d == nil || !*d {
		return "the CSIDriver does not set seLinuxMount: true (the runtime relabels the volume's files instead)"
	}
	if _, err := os.Stat(seLinuxEnforceFile); err != nil {
		return "this host has no SELinux (no " + seLinuxEnforceFile + "): the node passes no context mount option, as the kubelet, and the kernel could not show one"
	}
	return ""
}

// seLinuxMount: a pod with an SELinux level on a ReadWriteOncePod claim (of the block
// variant's class: a filesystem of the volume's own, whose superblock can carry a context);
// the pod's mount has the context of the pod's label.
func seLinuxMount(k *caseEnv) error {
	if _, err := k.claim("data", classBlock, defaultSize, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOncePod, nil); err != nil {
		return err
	}
	pod, err := k.runPod("app", []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Level: seLinuxLevel}}
	})
	if err != nil {
		return err
	}
	dir, err := k.claimPath(pod, "data")
	if err != nil {
		return err
	}
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	if err := checkSELinuxContext(infos, dir, seLinuxLabel); err != nil {
		return err
	}
	return k.deletePod("app")
}

// checkSELinuxContext: the last mount at dir has context=label among its superblock's (or
// its own) options.
func checkSELinuxContext(infos []mount.MountInfo, dir, label string) error {
	for i := len(infos) - 1; i >= 0; i-- {
		mi := infos[i]
		if mi.MountPoint != dir {
			continue
		}
		opts := unsplitQuoted(append(append([]string{}, mi.SuperOptions...), mi.MountOptions...))
		for _, o := range opts {
			if v, ok := strings.CutPrefix(o, "context="); ok && strings.Trim(v, `"`) == label {
				return nil
			}
		}
		return fmt.Errorf("the pod's mount %s (%s of %s) has no context=%q among its options %v: the driver did not mount the volume with the context mount flag of NodeStage/NodePublish",
			dir, mi.FsType, mi.Source, label, opts)
	}
	return fmt.Errorf("nothing mounted at %s", dir)
}

// unsplitQuoted joins again the options that a split at commas cut inside quotes: the
// kernel quotes a context with a comma (context="...:s0:c1,c2"), and mountinfo parsers
// split the options at every comma.
func unsplitQuoted(opts []string) []string {
	var out []string
	open := false
	for _, o := range opts {
		if open {
			out[len(out)-1] += "," + o
		} else {
			out = append(out, o)
		}
		if strings.Count(o, `"`)%2 == 1 {
			open = !open
		}
	}
	return out
}
