package localcluster

import (
	"os"
	"path/filepath"
	"testing"
)

// A build of another source tree removes the artifacts of other keys, but not one that a
// running process holds: its cluster restarts components from it.
func TestRemoveStaleLeavesHeldArtifacts(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(CacheDirEnv, cache)
	held, stale, keep := filepath.Join(cache, "kubevol-cluster-a"), filepath.Join(cache, "kubevol-cluster-b"), filepath.Join(cache, "kubevol-cluster-c")
	for _, p := range []string{held, stale, keep} {
		if err := os.WriteFile(p, []byte("binary"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hold(held)
	removeStale(cache, "kubevol-cluster-", keep)
	for p, want := range map[string]bool{held: true, held + inUseSuffix: true, stale: false, keep: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
	if got := newestEntry(cache, "kubevol-cluster-"); got == held+inUseSuffix {
		t.Errorf("newestEntry chose the lock file %s", got)
	}
}
