package lifecycle

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

// `kubevol up --demo` as a user runs it: it applies examples/, lists the demo pod's volumes
// with where they are mounted, shows the PVC's data survived recreating the pod, then takes
// a VolumeSnapshot of the claim and shows the data in a claim restored from it, and changes
// the claim's VolumeAttributesClass while in use: read-only, then writable again, and last
// takes the claim and a second one in a VolumeGroupSnapshot and shows the data in a claim
// restored from the group's member of the first.
func TestUpDemo(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "kvdemo-")
	if err != nil {
		t.Fatal(err)
	}
	// `up` keeps its state, mounts included, as the kubelet does across restarts: the
	// test removes them once the processes are gone.
	t.Cleanup(func() {
		mps, _ := mount.New("").List()
		for i := len(mps) - 1; i >= 0; i-- {
			if strings.HasPrefix(mps[i].Path, dir+"/") {
				_ = mount.New("").Unmount(mps[i].Path)
			}
		}
		_ = os.RemoveAll(dir)
	})
	p := framework.StartKubevol(t, "up", "--demo", "--dir", dir, "--node-name", "demo-e2e", "--status-interval", "10s")
	ctx := framework.Context(t, 5*time.Minute)
	var out string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(context.Context) (bool, error) {
		raw, _ := os.ReadFile(p.LogPath)
		out = string(raw)
		return strings.Contains(out, "restored from the group is mounted") || p.Exited(), nil
	})
	if err != nil || !strings.Contains(out, "hello.txt still says: written at") || !strings.Contains(out, "hello.txt says: written at") ||
		!strings.Contains(out, "restored from the group is mounted at") || strings.Count(out, "hello.txt says: written at") != 2 {
		t.Fatalf("demo did not finish (%v); output:\n%s", err, out)
	}
	for _, want := range []string{
		"volumes/kubernetes.io~csi/pvc-", "volumes/kubernetes.io~configmap/config", "volumes/kubernetes.io~secret/secret",
		"volumes/kubernetes.io~empty-dir/scratch", "volumes/kubernetes.io~csi/inline/mount", "mounted: ",
		"ready to use after", "class kubevol-local",
		"is read-only now", "takes writes again",
		"data → snapshot-", "notes → snapshot-", "content groupsnapcontent-",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	p.Stop()
}
