package verify

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// largeFileSizes are the sizes of upstream's volumeIO cases that fit a small volume.
var largeFileSizes = []int64{1 << 20, 100 << 20}

// largeFiles: files of 1 MiB and 100 MiB written through the mount (synced) are read back
// by the next pod with their size and SHA-256, as upstream's volumeIO cases.
func largeFiles(k *caseEnv) error {
	u, err := k.useClaim("data", classWFFC, "256Mi", "writer")
	if err != nil {
		return err
	}
	sums := map[string][]byte{}
	for _, size := range largeFileSizes {
		name := fmt.Sprintf("file-%d", size)
		if sums[name], err = writeRandom(filepath.Join(u.dir, name), size); err != nil {
			return err
		}
	}
	if err := k.deletePod("writer"); err != nil {
		return err
	}
	p, err := k.runPod("reader", u.vols, nil, nil)
	if err != nil {
		return err
	}
	dir, err := k.claimPath(p, "data")
	if err != nil {
		return err
	}
	for _, size := range largeFileSizes {
		name := fmt.Sprintf("file-%d", size)
		if err := checkFile(filepath.Join(dir, name), size, sums[name]); err != nil {
			return err
		}
	}
	return nil
}

// writeRandom writes size random bytes, syncs them and returns their SHA-256.
func writeRandom(path string, size int64) ([]byte, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("write through the mount path: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.Reader, size); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("fsync %s: %w", path, err)
	}
	return h.Sum(nil), f.Close()
}

// checkFile reads a file back and compares its size and SHA-256.
func checkFile(path string, size int64, sum []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read back through the mount path: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if n != size {
		return fmt.Errorf("%s has %d bytes, %d were written", path, n, size)
	}
	if !bytes.Equal(h.Sum(nil), sum) {
		return fmt.Errorf("%s: SHA-256 %x, %x was written", path, h.Sum(nil), sum)
	}
	return nil
}

// multiVolume: one pod with two filesystem claims and a raw block claim; each keeps its own
// data across the pod's re-creation (upstream's multiVolume "multiple volumes" cases).
func multiVolume(k *caseEnv) error {
	for _, c := range []string{"one", "two"} {
		if _, err := k.fsClaim(c, classWFFC); err != nil {
			return err
		}
	}
	if _, err := k.claim("dev", classBlock, defaultSize, corev1.PersistentVolumeBlock, corev1.ReadWriteOnce, nil); err != nil {
		return err
	}
	// A driver that refuses raw block makes the case not applicable, as block/raw.
	if _, err := k.blockPod("probe", "dev"); err != nil {
		return err
	}
	if err := k.deletePod("probe"); err != nil {
		return err
	}
	mounts := []corev1.Volume{kubecheck.ClaimVolume("one", "one"), kubecheck.ClaimVolume("two", "two")}
	devices := []corev1.Volume{kubecheck.ClaimVolume("dev", "dev")}
	p, err := k.runPod("first", mounts, devices, nil)
	if err != nil {
		return err
	}
	pvs := map[string]string{}
	for _, c := range []string{"one", "two", "dev"} {
		pv, err := k.boundPV(c)
		if err != nil {
			return err
		}
		pvs[c] = pv.Name
	}
	wantDev := bytes.Repeat([]byte("block of "+k.ns+" "), 32)
	for _, c := range []string{"one", "two"} {
		if err := os.WriteFile(filepath.Join(k.mountPath(p, pvs[c]), "which"), []byte(c), 0o644); err != nil {
			return fmt.Errorf("write through the mount of claim %s: %w", c, err)
		}
	}
	if err := writeDevice(k.devicePath(p, pvs["dev"]), wantDev); err != nil {
		return err
	}
	if err := k.deletePod("first"); err != nil {
		return err
	}
	p, err = k.runPod("second", mounts, devices, nil)
	if err != nil {
		return err
	}
	for _, c := range []string{"one", "two"} {
		got, err := os.ReadFile(filepath.Join(k.mountPath(p, pvs[c]), "which"))
		if err != nil {
			return fmt.Errorf("read back through the mount of claim %s: %w", c, err)
		}
		if string(got) != c {
			return fmt.Errorf("claim %s's mount holds %q: the volumes were mixed up", c, got)
		}
	}
	return checkDevice(k.devicePath(p, pvs["dev"]), wantDev)
}
