package localcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// inUseSuffix names the lock file beside a cached artifact that the clusters running it
// hold shared.
const inUseSuffix = ".inuse"

// hold marks an artifact of the cache (the control-plane binary, the CNI plugins) as in use
// for as long as this process runs, which is as long as the clusters it starts from it can
// restart a component: a build of another source tree on the same machine then leaves it in
// place. Without it, such a build removed the binary of a running cluster, which ran on
// until one of its components was restarted and could not be. An artifact outside the cache
// (a --cluster-binary of the user's) is not touched.
func hold(path string) {
	cache, err := cacheDir()
	if err != nil || !strings.HasPrefix(filepath.Clean(path), cache+string(filepath.Separator)) {
		return
	}
	heldMu.Lock()
	defer heldMu.Unlock()
	if held[path] {
		return
	}
	f, err := os.OpenFile(path+inUseSuffix, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return
	}
	// The descriptor stays open, and so the shared lock held, until the process exits.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return
	}
	held[path] = true
}

var (
	heldMu sync.Mutex
	held   = map[string]bool{}
)

// removeStale removes the artifacts of other keys under prefix, except keep, those being
// built (.tmp) and those a running cluster holds (hold).
func removeStale(cache, prefix, keep string) {
	old, _ := filepath.Glob(filepath.Join(cache, prefix+"*"))
	for _, o := range old {
		if o == keep || strings.HasSuffix(o, ".tmp") || strings.HasSuffix(o, inUseSuffix) {
			continue
		}
		removeUnheld(o)
	}
}

// removeUnheld removes the artifact at path and its lock file, unless a cluster holds it.
func removeUnheld(path string) {
	f, err := os.OpenFile(path+inUseSuffix, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		_ = os.RemoveAll(path)
		return
	}
	if err != nil {
		return
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return // held: a running cluster's
	}
	_ = os.RemoveAll(path)
	_ = os.Remove(path + inUseSuffix)
}
