package resizer

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/driver"
)

// The resizer is killed with SIGKILL twice while ControllerModifyVolume is in flight: once
// while the driver still delays the call (it never runs: the driver drops it when the
// connection goes), once after the driver applied it and holds the reply (the resizer never
// learns that it worked). Each time the claim records the target before the call, so the
// restarted resizer finishes that target, as upstream's external-resizer does with an
// InProgress claim: the class becomes current, the driver holds its parameters, and nothing
// on the claim says Infeasible or still in progress.
func TestModifyKilledMidCall(t *testing.T) {
	e := newEnv(t, "-v", "4", "--fault", "ControllerModifyVolume:delay=5s,count=1;ControllerModifyVolume:lose,count=1")
	sc := e.class(map[string]string{"type": "dir"})
	ro := e.vac("ro", map[string]string{driver.MutableReadOnly: "true"})
	_, pv := e.boundClaim("data", sc, "64Mi")
	handle := pv.Spec.CSI.VolumeHandle

	e.patchClass("data", ro)
	for i, mark := range []string{`"Request"`, `"Injected fault: reply lost"`} {
		// The driver logs the request when the call arrives, and the lost reply once the
		// call took effect: the resizer is killed with the call still open.
		e.waitDriverLog(`method="ControllerModifyVolume"`, mark)
		target := e.modifyTarget("data")
		e.resizer.Kill()
		if target != ro {
			t.Fatalf("kill %d: claim's target before the kill = %q, want %q", i+1, target, ro)
		}
		e.resizer.Start()
	}
	got := e.waitClaim("data", "modified to "+ro, modifiedTo(ro))
	if got.Spec.VolumeAttributesClassName == nil || *got.Spec.VolumeAttributesClassName != ro {
		t.Errorf("claim's spec class = %v, want %s", got.Spec.VolumeAttributesClassName, ro)
	}
	if c := ptr.Deref(e.pv(pv.Name).Spec.VolumeAttributesClassName, ""); c != ro {
		t.Errorf("PV class = %q, want %q", c, ro)
	}
	if params := e.volumeContext(handle); params[driver.MutableReadOnly] != "true" {
		t.Errorf("driver's volume context = %v, want %s=true (class %s)", params, driver.MutableReadOnly, ro)
	}
	// Two calls cut off by the kills, then the restarted resizer's one success.
	calls := e.calls("ControllerModifyVolume", handle)
	if len(calls) != 3 || calls[2] != "ControllerModifyVolume:OK" || slices.Contains(calls[:2], "ControllerModifyVolume:OK") {
		t.Errorf("driver calls: %v, want two cut off by the kills, then one OK", calls)
	}
	t.Logf("driver calls: %v", calls)
	for _, ev := range e.events("data") {
		if strings.Contains(ev, "VolumeModifyFailed") || strings.Contains(ev, "Infeasible") {
			t.Errorf("event %q: the modification never failed", ev)
		}
	}
}

// The resizer is killed after the driver applied a class and while it holds the reply, and
// the user asks for another class while the resizer is down. The claim's recorded target
// is finished first (the call may have run: the volume must not be left between classes
// without the claim saying which), then the new class is applied: both succeed, in that
// order, and the claim ends on the class it asks for, with nothing left in progress.
func TestModifyRedirectedWhileKilled(t *testing.T) {
	e := newEnv(t, "--fault", "ControllerModifyVolume:lose,count=1")
	sc := e.class(map[string]string{"type": "dir"})
	ro := e.vac("ro", map[string]string{driver.MutableReadOnly: "true"})
	rw := e.vac("rw", map[string]string{driver.MutableReadOnly: "false"})
	_, pv := e.boundClaim("data", sc, "64Mi")
	handle := pv.Spec.CSI.VolumeHandle

	e.patchClass("data", ro)
	e.waitDriverLog(`method="ControllerModifyVolume"`, `"Injected fault: reply lost"`)
	target := e.modifyTarget("data")
	e.resizer.Kill()
	if target != ro {
		t.Fatalf("claim's target before the kill = %q, want %q", target, ro)
	}
	e.patchClass("data", rw)
	e.resizer.Start()

	e.waitClaim("data", "modified to "+rw, modifiedTo(rw))
	if c := ptr.Deref(e.pv(pv.Name).Spec.VolumeAttributesClassName, ""); c != rw {
		t.Errorf("PV class = %q, want %q", c, rw)
	}
	if params := e.volumeContext(handle); params[driver.MutableReadOnly] != "false" {
		t.Errorf("driver's volume context = %v, want %s=false (class %s)", params, driver.MutableReadOnly, rw)
	}
	calls := e.calls("ControllerModifyVolume", handle)
	if !slices.Equal(calls, []string{"ControllerModifyVolume:Canceled", "ControllerModifyVolume:OK", "ControllerModifyVolume:OK"}) {
		t.Errorf("driver calls: %v, want the one cut off by the kill, then %s and %s", calls, ro, rw)
	}
	// Only the restarted resizer finished anything. An event for ro means it finished the
	// recorded target; with three calls and rw current, ro came first (else rw was called
	// twice).
	done := map[string]bool{}
	for _, ev := range e.events("data") {
		if strings.Contains(ev, "VolumeModifyFailed") || strings.Contains(ev, "Infeasible") {
			t.Errorf("event %q: the modification never failed", ev)
		}
		for _, class := range []string{ro, rw} {
			if strings.Contains(ev, "VolumeModifySuccessful") && strings.Contains(ev, "vac "+class+" ") {
				done[class] = true
			}
		}
	}
	if !done[ro] || !done[rw] {
		t.Errorf("VolumeModifySuccessful events for %v, want %s (the target recorded before the kill) and %s; events:\n%s",
			done, ro, rw, strings.Join(e.events("data"), "\n"))
	}
}

// waitDriverLog waits until a line of the driver's log holds every part.
func (e *env) waitDriverLog(parts ...string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(e.drv.LogPath)
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if allIn(line, parts) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no driver log line with %q: %v", parts, err)
	}
}

func allIn(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// modifyTarget is the class the claim's status says is being applied ("" when none).
func (e *env) modifyTarget(name string) string {
	e.t.Helper()
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	st := pvc.Status.ModifyVolumeStatus
	if st == nil || st.Status != corev1.PersistentVolumeClaimModifyVolumeInProgress {
		return ""
	}
	return st.TargetVolumeAttributesClassName
}

// volumeContext is what the driver reports of the volume, its mutable parameters included.
func (e *env) volumeContext(handle string) map[string]string {
	e.t.Helper()
	rsp, err := e.drv.Conn.Controller.ListVolumes(e.ctx, &csi.ListVolumesRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, en := range rsp.GetEntries() {
		if en.GetVolume().GetVolumeId() == handle {
			return en.GetVolume().GetVolumeContext()
		}
	}
	e.t.Fatalf("the driver has no volume %s", handle)
	return nil
}
