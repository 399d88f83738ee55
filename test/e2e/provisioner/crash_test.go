package provisioner_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// 200 claims are created, half of them deleted again at random moments, while the
// provisioner is killed with SIGKILL at random moments at least 20 times and restarted.
// In the end every live claim is Bound to exactly one PV, no deleted claim has a PV, and
// the driver holds exactly the volumes of the PVs.
func TestCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	t.Parallel()
	const claims, minKills = 200, 20
	// A slower CreateVolume widens the window between CreateVolume and the PV save.
	e := newEnv(t, envOptions{driverArgs: []string{"--fault", "CreateVolume:delay=150ms"}, provArgs: []string{"--retry-interval-max", "2s"}})
	sc := e.class(nil)

	var kills atomic.Int32
	stopKiller := make(chan struct{})
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for {
			select {
			case <-stopKiller:
				return
			case <-time.After(time.Duration(300+rand.IntN(1200)) * time.Millisecond):
			}
			e.prov.Kill()
			kills.Add(1)
			time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
			e.prov.Start()
		}
	}()

	var (
		mu      sync.Mutex
		deleted []types.UID
		live    []string
		wg      sync.WaitGroup
	)
	for i := range claims {
		pvc := e.createClaim(claimSpec(fmt.Sprintf("c-%03d", i), sc.Name, "8Mi", nil))
		if rand.IntN(2) == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.IntN(2500)) * time.Millisecond)
				e.deleteClaim(pvc.Name)
				mu.Lock()
				deleted = append(deleted, pvc.UID)
				mu.Unlock()
			}()
		} else {
			live = append(live, pvc.Name)
		}
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
	}
	wg.Wait()
	err := wait.PollUntilContextTimeout(e.ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		return kills.Load() >= minKills, nil
	})
	close(stopKiller)
	<-killerDone
	fatalIf(t, err, "only %d kills", kills.Load())
	if e.prov.Exited() {
		e.startProvisioner()
	}
	t.Logf("%d claims (%d deleted), provisioner killed %d times", claims, len(deleted), kills.Load())

	var problem string
	err = wait.PollUntilContextTimeout(e.ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := e.crashLoopProblem(ctx, live, deleted)
		if ctx.Err() == nil {
			problem = p // keep the last real finding, not the poll's own timeout
		}
		return p == "", nil
	})
	if err != nil {
		t.Fatalf("after the crash loop: %s", problem)
	}
	e.waitJournalEmpty()
}

// crashLoopProblem describes the first invariant that does not hold yet, or "".
func (e *env) crashLoopProblem(ctx context.Context, live []string, deleted []types.UID) string {
	pvcs, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	byName := map[string]corev1.PersistentVolumeClaim{}
	for _, p := range pvcs.Items {
		byName[p.Name] = p
	}
	for _, name := range live {
		if p := byName[name]; p.Status.Phase != corev1.ClaimBound {
			return fmt.Sprintf("claim %s is %q, not Bound", name, p.Status.Phase)
		}
	}
	if len(pvcs.Items) != len(live) {
		return fmt.Sprintf("%d claims exist, want the %d live ones", len(pvcs.Items), len(live))
	}
	pvs, err := e.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var handles []string
	perClaim := map[types.UID]int{}
	for _, pv := range pvs.Items {
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != e.driver {
			continue
		}
		handles = append(handles, pv.Spec.CSI.VolumeHandle)
		if pv.Spec.ClaimRef != nil {
			perClaim[pv.Spec.ClaimRef.UID]++
		}
	}
	for _, uid := range deleted {
		if perClaim[uid] > 0 {
			return fmt.Sprintf("deleted claim %s still has a PV", uid)
		}
	}
	for _, name := range live {
		if n := perClaim[byName[name].UID]; n != 1 {
			return fmt.Sprintf("claim %s has %d PVs", name, n)
		}
	}
	slices.Sort(handles)
	if vols := e.volumes(); !slices.Equal(vols, handles) {
		return fmt.Sprintf("driver volumes (%d) differ from PV handles (%d): without a PV %v, without a volume %v",
			len(vols), len(handles), missing(vols, handles), missing(handles, vols))
	}
	return ""
}

// missing is what of want is not in have.
func missing(want, have []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}
