package volumemanager

import (
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// cleanSubpaths unmounts and removes the subPath bind mounts of a pod's volume ("" for all
// volumes) under <pod>/volume-subpaths, before the volume is torn down (upstream:
// CleanSubPaths). Only mount points below that directory are touched.
func (m *Manager) cleanSubpaths(uid types.UID, specName string) error {
	dir := m.cfg.Paths.PodSubpathsDir(uid)
	if specName != "" {
		dir = filepath.Join(dir, specName)
	}
	if _, err := os.Lstat(dir); err != nil {
		return nil
	}
	mps, err := m.mounter.List()
	if err != nil {
		return err
	}
	for _, mp := range mps {
		if strings.HasPrefix(mp.Path, dir+"/") {
			if err := m.mounter.Unmount(mp.Path); err != nil {
				return err
			}
		}
	}
	return os.RemoveAll(dir)
}
