package resizer

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevol/kubevol/internal/runtime/controller/controllertest"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/testing/csitest"
)

// syncEnv is a Controller on a controllertest fixture: nothing runs, the test calls the
// syncs one key at a time. Its env reads and writes the fixture's API.
type syncEnv struct {
	*env
	f      *controllertest.Fixture
	c      *Controller
	modDrv *modifyDriver
	// seen are the events recorded so far, "Type Reason Message".
	seen []string
}

// newSyncEnv builds a Controller of cfg, as startConfig does, without running it.
func newSyncEnv(t *testing.T, drv *modifyDriver, cfg Config, objs ...runtime.Object) *syncEnv {
	t.Helper()
	conn, err := csiclient.Dial(csiclient.Config{Address: csitest.StartAs(t, drv.Driver, drv).Address, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f := controllertest.New(t, objs...)
	cfg.Client, cfg.CSI, cfg.DriverName, cfg.informers = f.Client, conn, driverName, f.Informers
	c, err := New(f.Ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's recorder instead of the broadcaster, which would write events through
	// the client on its own goroutine.
	c.stopEvents()
	c.recorder = f.Recorder
	c.claimWriter.Recorder, c.pvWriter.Recorder = f.Recorder, f.Recorder
	return &syncEnv{env: &env{t: t, ctx: f.Ctx, cs: f.Client, drv: drv.fakeDriver}, f: f, c: c, modDrv: drv}
}

// expand runs one sync of the expansion queue for the claim ns/name, modify one of the
// modification queue, each under the claim's lock as the workers run them.
func (e *syncEnv) expand(name string) error {
	e.t.Helper()
	return controllertest.Sync(e.f, e.c.serialised(e.c.syncClaim), ns+"/"+name)
}

func (e *syncEnv) modify(name string) error {
	e.t.Helper()
	return controllertest.Sync(e.f, e.c.serialised(e.c.syncModify), ns+"/"+name)
}

// sawEvent fails the test unless an event of reason whose message contains want was
// recorded so far.
func (e *syncEnv) sawEvent(reason, want string) {
	e.t.Helper()
	e.seen = append(e.seen, e.f.Events()...)
	for _, ev := range e.seen {
		if _, rest, ok := strings.Cut(ev, " "+reason+" "); ok && strings.Contains(rest, want) {
			return
		}
	}
	e.t.Fatalf("no %s event with %q; events: %q", reason, want, e.seen)
}

// syncUntil runs syncs of the expansion queue for the claim, as its worker would take the
// key again, until cond holds of the stored claim; it fails the test after max syncs.
func (e *syncEnv) syncUntil(name, what string, max int, cond func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	return e.until(e.expand, name, what, max, cond)
}

// modifyUntil is syncUntil for the modification queue.
func (e *syncEnv) modifyUntil(name, what string, max int, cond func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	return e.until(e.modify, name, what, max, cond)
}

func (e *syncEnv) until(sync func(string) error, name, what string, max int, cond func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	for range max {
		_ = sync(name)
		if got := e.claim(name); cond(got) {
			return got
		}
	}
	e.t.Fatalf("claim %s not %s after %d syncs; status: %+v", name, what, max, e.claim(name).Status)
	return nil
}
