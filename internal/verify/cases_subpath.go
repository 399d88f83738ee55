package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/pkg/volume"
)

// subPathApplies: a real kubelet bind-mounts a container's subPaths (volume-subpaths/) only
// as it creates that container (kuberuntime's makeMounts, after the image is there), and
// verify's pods run no container; the node agent mounts them with the volumes.
func subPathApplies(e *env) string {
	if e.kubelet {
		return "the node is a kubelet: it mounts a subPath only as it creates the container, and verify's pods run none"
	}
	return ""
}

// subPaths: subPath volumeMounts as upstream's subPath cases: a directory, a file and a
// read-only subPath are bind-mounted where the container would see them; the pod is torn
// down after the subdirectory was removed under it; a subPath that is a symlink out of the
// volume is refused, with a FailedMount event and nothing mounted.
func subPaths(k *caseEnv) error {
	u, err := k.useClaim("data", classWFFC, defaultSize, "prep")
	if err != nil {
		return err
	}
	for _, step := range []func() error{
		func() error { return os.MkdirAll(filepath.Join(u.dir, "dir"), 0o755) },
		func() error { return os.WriteFile(filepath.Join(u.dir, "dir", "inside"), []byte("in dir"), 0o644) },
		func() error { return os.WriteFile(filepath.Join(u.dir, "file"), []byte("a file"), 0o644) },
		func() error { return os.Symlink("/etc", filepath.Join(u.dir, "escape")) },
	} {
		if err := step(); err != nil {
			return fmt.Errorf("prepare the volume through the mount path: %w", err)
		}
	}
	if err := k.deletePod("prep"); err != nil {
		return err
	}
	pv, err := k.boundPV("data")
	if err != nil {
		return err
	}
	mounts := []corev1.VolumeMount{
		{Name: "data", MountPath: "/dir", SubPath: "dir"},
		{Name: "data", MountPath: "/file", SubPath: "file"},
		{Name: "data", MountPath: "/ro", SubPath: "dir", ReadOnly: true},
	}
	p, err := k.runPod("app", u.vols, nil, withMounts(mounts))
	if err != nil {
		return err
	}
	paths := volume.Paths{Root: k.root}
	target := func(p *corev1.Pod, i int) string { return paths.PodSubpathDir(p.UID, pv.Name, "app", i) }
	if err := k.waitMounted(target(p, 0), target(p, 1), target(p, 2)); err != nil {
		return err
	}
	if got, err := os.ReadFile(filepath.Join(target(p, 0), "inside")); err != nil || string(got) != "in dir" {
		return fmt.Errorf("directory subPath: read %q, %v; want the file written into the subdirectory", got, err)
	}
	if got, err := os.ReadFile(target(p, 1)); err != nil || string(got) != "a file" {
		return fmt.Errorf("file subPath: read %q, %v; want the file's content", got, err)
	}
	if err := checkReadOnly(target(p, 2)); err != nil {
		return fmt.Errorf("read-only subPath: %w", err)
	}
	// Upstream's "should be able to unmount after the subpath directory is deleted".
	if err := os.RemoveAll(filepath.Join(k.mountPath(p, pv.Name), "dir")); err != nil {
		return err
	}
	if err := k.deletePod("app"); err != nil {
		return fmt.Errorf("after its subPath directory was removed: %w", err)
	}
	for i := range mounts {
		if isMountPoint(target(p, i)) {
			return fmt.Errorf("subPath mount %s left after the pod", target(p, i))
		}
	}
	bad, err := k.pod("escape", u.vols, nil, withMounts([]corev1.VolumeMount{{Name: "data", MountPath: "/etc-of-host", SubPath: "escape"}}))
	if err != nil {
		return err
	}
	if err := k.waitEvent(bad.Name, "FailedMount", "subPath"); err != nil {
		return fmt.Errorf("a subPath symlink out of the volume was not refused: %w", err)
	}
	if t := target(bad, 0); isMountPoint(t) {
		return fmt.Errorf("a subPath symlink out of the volume was mounted at %s", t)
	}
	return nil
}

// withMounts replaces the container's volumeMounts.
func withMounts(m []corev1.VolumeMount) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts = m }
}

// waitMounted waits for host paths to be mount points.
func (k *caseEnv) waitMounted(paths ...string) error {
	var missing string
	err := kubecheck.Poll(k.ctx, waitTimeout, func(context.Context) (bool, error) {
		for _, p := range paths {
			if !isMountPoint(p) {
				missing = p
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s not mounted: %w", missing, err)
	}
	return nil
}

// waitEvent waits for an event of reason on an object of the case's namespace whose message
// contains text.
func (k *caseEnv) waitEvent(object, reason, text string) error {
	_, err := kubecheck.WaitForEvent(k.ctx, k.cs, k.ns, object, waitTimeout, kubecheck.EventWith(reason, text))
	return err
}
