package lifecycle

import (
	"context"
	"testing"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// CSIDriver.requiresRepublish: the agent calls NodePublishVolume again every
// --sync-frequency while the pod runs (upstream: every pod sync), without staging again;
// a driver without it is published once (the lifecycle tests count that).
func TestRequiresRepublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{republish: true})
	e.waitRegistered()
	pvc := e.pvc("data")
	pod := e.waitVolumesReady(e.pod("app", kubecheck.ClaimVolume("data", pvc.Name)))
	pv := e.boundPV(pvc.Name)
	handle := pv.Spec.CSI.VolumeHandle
	e.poll("NodePublishVolume repeated", func(context.Context) (bool, error) {
		return count(e.succeeded(handle), "NodePublishVolume") >= 3, nil
	})
	if n := count(e.succeeded(handle), "NodeStageVolume"); n != 1 {
		t.Errorf("NodeStageVolume succeeded %d times, want 1", n)
	}
	e.deletePod(pod)
	e.deleteClaim(pvc.Name, pv.Name)
	if err := inOrder(e.succeeded(handle), []string{"NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "DeleteVolume"}); err != nil {
		t.Errorf("teardown: %v; calls: %v", err, e.succeeded(handle))
	}
	if m := kubecheck.MountsUnder(e.dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}
