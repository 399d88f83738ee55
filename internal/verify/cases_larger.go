package verify

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
	p, err := k.runPod("both", []corev1.Volume{claimVolume("source", "source"), claimVolume("bigger", "bigger")}, nil, nil)
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
	dir, err := k.claimPath(p, "bigger")
	if err != nil {
		return err
	}
	size, err := fsSize(dir)
	if err != nil {
		return err
	}
	return checkMinSize(size, resource.MustParse(fsSizeAfter))
}

// checkMinSize: a filesystem made for a claim of want bytes has at least nine tenths of them
// (what xfs keeps for its log and metadata).
func checkMinSize(size int64, want resource.Quantity) error {
	if size < want.Value()*9/10 {
		return fmt.Errorf("the copy's filesystem has %d MiB, the claim asked for %s: it was not grown to the new size", size>>20, want.String())
	}
	return nil
}
