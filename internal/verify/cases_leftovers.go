package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// leftovers: after every case, nothing of the run is left: no namespace, no PV, no
// VolumeAttachment, no mount of its pods, and (ListVolumes) no volume that was not there
// before.
func leftovers(k *caseEnv) error {
	sel := metav1.ListOptions{LabelSelector: runLabel + "=" + k.runID}
	var left []string
	err := kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
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
		if k.root != "" {
			if staged := k.stagedGone(now); len(staged) > 0 {
				return fmt.Errorf("left staged: volumes the driver no longer has are still mounted at %s", strings.Join(staged, ", "))
			}
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
	// The pods of the multinode/ cases ran on the other nodes of a kubevol up --nodes too.
	roots := []string{k.root}
	if k.root != "" {
		others, _ := filepath.Glob(filepath.Join(k.o.Dir, "nodes", "*", "node"))
		roots = append(roots, others...)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, mp := range mps {
		for _, uid := range k.uids {
			for _, root := range roots {
				if strings.HasPrefix(mp.Path, filepath.Join(root, "pods", string(uid))+"/") {
					out = append(out, mp.Path)
				}
			}
		}
	}
	return out
}

// stagedGone lists the staging mounts of the driver on this node whose volume (vol_data.json
// beside globalmount) the driver no longer lists: a volume deleted while still staged.
func (k *caseEnv) stagedGone(listed map[string]bool) []string {
	dirs, _ := filepath.Glob(filepath.Join(k.root, "plugins", "kubernetes.io", "csi", k.driver, "*", "globalmount"))
	var out []string
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(filepath.Dir(dir), "vol_data.json"))
		if err != nil {
			continue
		}
		var data struct {
			VolumeHandle string `json:"volumeHandle"`
		}
		if json.Unmarshal(raw, &data) == nil && data.VolumeHandle != "" && !listed[data.VolumeHandle] && isMountPoint(dir) {
			out = append(out, dir+" ("+data.VolumeHandle+")")
		}
	}
	return out
}
