package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/component/driver/drivertest"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// lifecycle are the calls that create, mount, unmount and delete volumes.
var lifecycle = []string{"CreateVolume", "DeleteVolume", "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"}

// stormFaults make the driver hostile for the whole test: a fifth of the lifecycle calls
// fail with UNAVAILABLE, every call waits a second, some controller calls hang until the
// provisioner's deadline, and some calls take effect but lose their reply: held until the
// provisioner's deadline for the controller, broken at once (UNAVAILABLE) for the node,
// whose operation timeout is the kubelet's two minutes. The identity and capability calls
// are only delayed: the provisioner, as upstream's, exits when they fail at its start and
// counts on a supervisor to restart it, which this test has not.
func stormFaults() []string {
	var unavailable, lose []string
	for _, m := range lifecycle {
		unavailable = append(unavailable, m+":error=UNAVAILABLE,rate=0.2")
		if strings.HasPrefix(m, "Node") {
			lose = append(lose, m+":lose,error=UNAVAILABLE,rate=0.1")
		} else {
			lose = append(lose, m+":lose,rate=0.1")
		}
	}
	return []string{
		"*:delay=1s",
		strings.Join(unavailable, ";"),
		"CreateVolume:hang,rate=0.05;DeleteVolume:hang,rate=0.05",
		strings.Join(lose, ";"),
	}
}

// TestStorm provisions 200 claims for 100 pods through a faulty driver and restarts etcd
// and kube-apiserver while they are being provisioned and mounted. Every component must
// converge by itself: all claims Bound, all pods VolumesReady, one driver volume per PV (a
// lost CreateVolume reply makes no duplicate), the components still running; and after the
// deletion, through the same faults, no volume, PV, mount or loop device is left.
//
// It restarts the package's control plane, so it does not run in parallel: Go runs it
// while the parallel tests of the package wait.
func TestStorm(t *testing.T) {
	e := newEnv(t, envOptions{faults: stormFaults()})
	ctx := framework.Context(t, 15*time.Minute)
	conn, err := drivertest.Dial("unix://" + filepath.Join(e.dir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctrl := csi.NewControllerClient(conn)
	e.waitRegistered()

	start := time.Now()
	pods := e.createWave(ctx, "p", 100)
	// The restart comes once mounting has begun, with provisioning still under way.
	e.pollFor(ctx, "the first pods VolumesReady", func(ctx context.Context) (bool, error) {
		_, ready, err := e.count(ctx, pods)
		return err == nil && ready >= 10, nil
	})
	t.Logf("restarting etcd and kube-apiserver %s after the start: %s", time.Since(start).Round(time.Second), e.progress(ctx, pods))
	restart := time.Now()
	if err := framework.Cluster().Restart(ctx, localcluster.Etcd, localcluster.APIServer); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("etcd and kube-apiserver back in %s", time.Since(restart).Round(100*time.Millisecond))
	e.waitWave(ctx, pods)
	framework.Figure(t, "converged %s after the restart of etcd and kube-apiserver, %s after the start", time.Since(restart).Round(time.Second), time.Since(start).Round(time.Second))
	e.checkNoDuplicates(ctx, ctrl, 2*len(pods))
	for _, p := range []struct {
		name string
		p    *framework.Process
	}{{"driver", e.driver}, {"provisioner", e.prov}, {"node agent", e.agent}} {
		if p.p.Exited() {
			t.Errorf("kubevol %s exited during the storm", p.name)
		}
	}
	for _, s := range framework.Cluster().Status(ctx) {
		if !s.Running || !s.Healthy {
			t.Errorf("%s after the restart: running %v, healthy %v: %s", s.Name, s.Running, s.Healthy, s.Detail)
		}
	}

	// Teardown through the same faults: nothing may be left.
	start = time.Now()
	e.deleteWave(ctx, pods)
	e.waitWaveGone(ctx, pods)
	t.Logf("teardown: %d pods and %d claims gone in %s", len(pods), 2*len(pods), time.Since(start).Round(time.Second))
	e.checkNoDuplicates(ctx, ctrl, 0)
	m := kubecheck.MountsUnder(e.dir)
	if len(m) > 0 {
		t.Errorf("%d mounts left: %v", len(m), m)
	}
	out, _ := exec.Command("losetup", "-a").Output()
	if strings.Contains(string(out), e.dir) {
		t.Errorf("loop devices left:\n%s", out)
	}
	t.Logf("leaks: %d mounts, loop devices: %q", len(m), strings.TrimSpace(framework.GrepLines(string(out), e.dir)))
	e.logFaults()
}

// logFaults reports what the clients saw per lifecycle method and how many replies were
// lost, from the call log and the driver's log.
func (e *env) logFaults() {
	seen := map[string]map[string]int{}
	for _, c := range e.calls() {
		if seen[c.Method] == nil {
			seen[c.Method] = map[string]int{}
		}
		seen[c.Method][c.Code]++
	}
	for _, m := range lifecycle {
		e.t.Logf("%s: %v", m, seen[m])
	}
	log, err := os.ReadFile(e.driver.LogPath)
	if err == nil {
		e.t.Logf("replies lost: %d", strings.Count(string(log), "Injected fault: reply lost"))
	}
}

// createWave creates n pods named prefix-N, each with two new claims, concurrently.
func (e *env) createWave(ctx context.Context, prefix string, n int) []string {
	e.t.Helper()
	names := make([]string, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs <- e.createPodWithClaims(ctx, names[i])
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return names
}

func (e *env) createPodWithClaims(ctx context.Context, name string) error {
	mode := corev1.PersistentVolumeFilesystem
	var vols []corev1.Volume
	for _, c := range []string{"a", "b"} {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + c, Namespace: e.ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: &e.sc,
				VolumeMode:       &mode,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
			},
		}
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			return err
		}
		vols = append(vols, kubecheck.ClaimVolume(c, pvc.Name))
	}
	pod := e.podObject(name, vols, nil)
	// The ServiceAccount admission plugin rejects pods until the default ServiceAccount exists.
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, nil
	})
}

// pollFor polls cond with a deadline generous enough for a loaded machine; API errors
// (the apiserver may be restarting) count as not yet.
func (e *env) pollFor(ctx context.Context, what string, cond wait.ConditionWithContextFunc) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, cond); err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitWave waits until every pod of the wave is VolumesReady and all its claims Bound.
func (e *env) waitWave(ctx context.Context, pods []string) {
	e.t.Helper()
	var last string
	e.pollFor(ctx, "pods and claims of "+pods[0]+"… ready", func(ctx context.Context) (bool, error) {
		bound, ready, err := e.count(ctx, pods)
		if err != nil {
			return false, nil
		}
		last = fmt.Sprintf("%d/%d claims Bound, %d/%d pods VolumesReady", bound, 2*len(pods), ready, len(pods))
		return bound == 2*len(pods) && ready == len(pods), nil
	})
	e.t.Logf("%s", last)
}

func (e *env) count(ctx context.Context, pods []string) (bound, ready int, err error) {
	want := map[string]bool{}
	for _, p := range pods {
		want[p] = true
	}
	pvcs, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	for _, c := range pvcs.Items {
		if len(c.Name) > 2 && want[c.Name[:len(c.Name)-2]] && c.Status.Phase == corev1.ClaimBound {
			bound++
		}
	}
	list, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range list.Items {
		if !want[p.Name] {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == "kubevol.io/VolumesReady" && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return bound, ready, nil
}

// progress describes where the storm is, for the log.
func (e *env) progress(ctx context.Context, pods []string) string {
	bound, ready, _ := e.count(ctx, pods)
	pvs, _ := e.pvs(ctx)
	return fmt.Sprintf("%d/%d claims Bound, %d PVs, %d/%d pods VolumesReady", bound, 2*len(pods), pvs, ready, len(pods))
}

// deleteWave deletes the pods of a wave and their claims without waiting.
func (e *env) deleteWave(ctx context.Context, pods []string) {
	e.t.Helper()
	for _, p := range pods {
		if err := e.cs.CoreV1().Pods(e.ns).Delete(ctx, p, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
		for _, c := range []string{"a", "b"} {
			if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx, p+"-"+c, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				e.t.Fatal(err)
			}
		}
	}
}

// waitWaveGone waits until the pods and claims of a wave are gone and no PV of the class is
// left but those of other claims.
func (e *env) waitWaveGone(ctx context.Context, pods []string) {
	e.t.Helper()
	want := map[string]bool{}
	for _, p := range pods {
		want[p] = true
	}
	var last string
	e.pollFor(ctx, "pods, claims and PVs of "+pods[0]+"… gone", func(ctx context.Context) (bool, error) {
		list, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		podsLeft := 0
		for _, p := range list.Items {
			if want[p.Name] {
				podsLeft++
			}
		}
		pvs, err := e.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pvsLeft := 0
		for _, pv := range pvs.Items {
			if ref := pv.Spec.ClaimRef; pv.Spec.StorageClassName == e.sc && ref != nil && len(ref.Name) > 2 && want[ref.Name[:len(ref.Name)-2]] {
				pvsLeft++
			}
		}
		last = fmt.Sprintf("%d pods and %d PVs left", podsLeft, pvsLeft)
		return podsLeft == 0 && pvsLeft == 0, nil
	})
	e.t.Logf("%s", last)
}

// pvs counts the PVs of the test's class.
func (e *env) pvs(ctx context.Context) (int, error) {
	list, err := e.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pv := range list.Items {
		if pv.Spec.StorageClassName == e.sc {
			n++
		}
	}
	return n, nil
}

// checkNoDuplicates compares the driver's volumes with the PVs of the class: each must be
// want. ListVolumes goes through the faults too, so it is retried.
func (e *env) checkNoDuplicates(ctx context.Context, ctrl csi.ControllerClient, want int) {
	e.t.Helper()
	var vols []*csi.ListVolumesResponse_Entry
	e.pollFor(ctx, "ListVolumes through the faults", func(ctx context.Context) (bool, error) {
		vols = nil
		token := ""
		for {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			resp, err := ctrl.ListVolumes(cctx, &csi.ListVolumesRequest{StartingToken: token})
			cancel()
			if err != nil {
				return false, nil
			}
			vols = append(vols, resp.GetEntries()...)
			if token = resp.GetNextToken(); token == "" {
				return true, nil
			}
		}
	})
	pvs, err := e.pvs(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("driver volumes %d, PVs of the class %d, want %d", len(vols), pvs, want)
	if len(vols) != want || pvs != want {
		e.t.Errorf("driver has %d volumes and the cluster %d PVs of the class, want %d each", len(vols), pvs, want)
	}
}
