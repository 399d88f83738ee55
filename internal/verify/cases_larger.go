package verify

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// restoreLarger: a snapshot restored into a claim larger than its source.
func restoreLarger(k *caseEnv) error {
	return k.copyLarger(func() (*corev1.TypedLocalObjectReference, error) {
		if err := k.snapshot("snap", "source"); err != nil {
			return nil, err
		}
		return snapshotRef("snap"), nil
	})
}

// cloneLarger: a claim cloned into a larger one.
func cloneLarger(k *caseEnv) error {
	return k.copyLarger(func() (*corev1.TypedLocalObjectReference, error) {
		return &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "source"}, nil
	})
}

// copyLarger: an xfs claim's copy (from the data source source makes) into a claim twice
// its size shows a filesystem of at least the new size with the data intact (upstream's
// provisioning "should provision correct filesystem size when restoring snapshot to larger
// size pvc"), and the source and the copy are mounted in one pod at once: xfs refuses a
// second filesystem with the same UUID unless the driver sees to it (upstream's multiVolume
// "should concurrently access the volume and restored snapshot/its clone").
func (k *caseEnv) copyLarger(source func() (*corev1.TypedLocalObjectReference, error)) error {
	u, err := k.useClaim("source", classFS, fsSizeBefore, "writer")
	if err != nil {
		return err
	}
	if err := k.deletePod("writer"); err != nil {
		return err
	}
	src, err := source()
	if err != nil {
		return err
	}
	if _, err := k.claim("bigger", classFS, fsSizeAfter, corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce, src); err != nil {
		return err
	}
	p, err := k.runPod("both", []corev1.Volume{kubecheck.ClaimVolume("source", "source"), kubecheck.ClaimVolume("bigger", "bigger")}, nil, nil)
	if err != nil {
		return fmt.Errorf("the source and its copy in one pod: %w", err)
	}
	for _, c := range []string{"source", "bigger"} {
		dir, err := k.claimPath(p, c)
		if err != nil {
			return err
		}
		if err := readProof(dir, u.want); err != nil {
			return fmt.Errorf("claim %s: %w", c, err)
		}
	}
	sizes := map[string]int64{}
	for _, c := range []string{"source", "bigger"} {
		dir, err := k.claimPath(p, c)
		if err != nil {
			return err
		}
		v, why, err := k.observe(dir, c)
		if err != nil {
			return err
		}
		if why != "" {
			return unobservable("the copy holds its source's data and is mounted beside it", why+" (claim "+c+")")
		}
		sizes[c] = v.size
	}
	if err := checkGrowth(sizes["source"], sizes["bigger"]); err != nil {
		return fmt.Errorf("the copy into a claim of %s, its source of %s: %w", fsSizeAfter, fsSizeBefore, err)
	}
	return nil
}
