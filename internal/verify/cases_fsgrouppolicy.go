package verify

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// fsGroupPolicy: fsGroupChangePolicy as upstream's fsgroupchangepolicy cases. A file whose
// group was changed behind the pod's back keeps it under OnRootMismatch when the next pod
// has the same fsGroup (the root matches, no walk), and is walked under Always; a pod of
// another fsGroup changes everything under either policy.
func fsGroupPolicy(k *caseEnv) error {
	if _, err := k.fsClaim("data", classWFFC); err != nil {
		return err
	}
	const gidA, gidB = 4100, 4200
	steps := []struct {
		policy   corev1.PodFSGroupChangePolicy
		gid      int64
		wantFile uint32 // the group of the changed file once the pod runs
	}{
		{corev1.FSGroupChangeOnRootMismatch, gidA, gidA},
		{corev1.FSGroupChangeOnRootMismatch, gidA, 0}, // root matches: no walk
		{corev1.FSGroupChangeAlways, gidA, gidA},
		{corev1.FSGroupChangeOnRootMismatch, gidB, gidB},
	}
	for i, s := range steps {
		name := fmt.Sprintf("pod-%d", i)
		p, err := k.runPod(name, []corev1.Volume{kubecheck.ClaimVolume("data", "data")}, nil, func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(s.gid), FSGroupChangePolicy: ptr.To(s.policy)}
		})
		if err != nil {
			return err
		}
		dir, err := k.claimPath(p, "data")
		if err != nil {
			return err
		}
		file := filepath.Join(dir, "file")
		if i == 0 {
			if err := os.WriteFile(file, []byte("x"), 0o664); err != nil {
				return fmt.Errorf("write through the mount path: %w", err)
			}
		} else if err := checkGroups(dir, file, uint32(s.gid), s.wantFile); err != nil {
			return fmt.Errorf("pod with fsGroup %d, fsGroupChangePolicy %s: %w", s.gid, s.policy, err)
		}
		// Behind the next pod's back: the file's group goes to root, the volume root's stays.
		if err := os.Chown(file, -1, 0); err != nil {
			return err
		}
		if err := k.deletePod(name); err != nil {
			return err
		}
	}
	return nil
}

// checkGroups checks the group of a volume's root and of a file in it.
func checkGroups(root, file string, wantRoot, wantFile uint32) error {
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return err
	}
	if st.Gid != wantRoot || st.Mode&unix.S_ISGID == 0 {
		return fmt.Errorf("volume root has gid %d, mode %o; want gid %d with setgid", st.Gid, st.Mode&0o7777, wantRoot)
	}
	if err := unix.Stat(file, &st); err != nil {
		return err
	}
	if st.Gid != wantFile {
		return fmt.Errorf("file %s has gid %d, want %d", filepath.Base(file), st.Gid, wantFile)
	}
	return nil
}
