package claim

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

var immediate, late = storagev1.VolumeBindingImmediate, storagev1.VolumeBindingWaitForFirstConsumer

// nodeController is a claim controller of a node deployment whose claim cache is filled
// by hand, with a clock the test moves.
func nodeController(cs *fake.Clientset, node string, clock *time.Time) *Controller {
	c := &Controller{
		cfg: Config{ControllerConfig: sidecar.ControllerConfig{Client: cs, DriverName: driverName},
			Node: &NodeDeployment{NodeName: node, Topology: map[string]string{"topology.kubevol.io/node": node},
				ImmediateBinding: true, BaseDelay: 20 * time.Second, MaxDelay: 60 * time.Second}},
		claims:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		race:     newOwnerRace(),
		topology: true,
	}
	c.race.now = func() time.Time { return *clock }
	return c
}

func testClaim(selected string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1", ResourceVersion: "1",
		Annotations: map[string]string{pvspec.AnnStorageProvisioner: driverName}}}
	if selected != "" {
		pvc.Annotations[pvspec.AnnSelectedNode] = selected
	}
	return pvc
}

func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	// controller.RetryAfter's message is the only view of its delay from outside.
	if err == nil || !strings.HasPrefix(err.Error(), "retry after ") {
		t.Fatalf("want a retry-after error, got %v", err)
	}
	d, perr := time.ParseDuration(strings.TrimPrefix(err.Error(), "retry after "))
	if perr != nil {
		t.Fatal(perr)
	}
	return d
}

func TestCheckNodeFilter(t *testing.T) {
	allowOther := []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: "topology.kubevol.io/node", Values: []string{"node-b"}}}}}
	for _, tc := range []struct {
		name     string
		selected string
		mode     *storagev1.VolumeBindingMode
		allowed  []corev1.TopologySelectorTerm
		noImm    bool
		mine     bool
		retry    bool
	}{
		{name: "selected this node", selected: "node-a", mode: &late, mine: true},
		{name: "selected another node", selected: "node-b", mode: &late},
		{name: "immediate claim taken by another node", selected: "node-b", mode: &immediate},
		{name: "late binding without a node yet", mode: &late},
		{name: "immediate binding disabled", mode: &immediate, noImm: true},
		{name: "allowedTopologies exclude this node", mode: &immediate, allowed: allowOther},
		{name: "immediate claim waits before the race", mode: &immediate, retry: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			c := nodeController(fake.NewClientset(), "node-a", &now)
			c.cfg.Node.ImmediateBinding = !tc.noImm
			class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Provisioner: driverName, VolumeBindingMode: tc.mode, AllowedTopologies: tc.allowed}
			mine, err := c.checkNode(context.Background(), testClaim(tc.selected), class)
			if mine != tc.mine {
				t.Errorf("mine = %v, want %v", mine, tc.mine)
			}
			if tc.retry {
				retryDelay(t, err)
			} else if err != nil {
				t.Errorf("unexpected error %v", err)
			}
		})
	}
	// Without a node deployment every claim is this instance's.
	c := &Controller{race: newOwnerRace()}
	if mine, err := c.checkNode(context.Background(), testClaim("node-b"), &storagev1.StorageClass{}); !mine || err != nil {
		t.Errorf("central provisioner: mine=%v err=%v, want true", mine, err)
	}
}

func TestOwnerDelayStaysInBounds(t *testing.T) {
	nd := &NodeDeployment{BaseDelay: 20 * time.Second, MaxDelay: 60 * time.Second}
	r := newOwnerRace()
	r.jitter = func(d time.Duration) time.Duration { return d / 2 } // the largest jitter
	for n := 0; n < 8; n++ {
		r.attempts["u"] = n
		if d := r.delay(nd, "u"); d < nd.BaseDelay || d > nd.MaxDelay {
			t.Errorf("attempt %d: delay %s outside [%s, %s]", n, d, nd.BaseDelay, nd.MaxDelay)
		}
	}
	r.jitter = func(time.Duration) time.Duration { return 0 }
	r.attempts["u"] = 1
	if d := r.delay(nd, "u"); d != 40*time.Second {
		t.Errorf("second attempt: delay %s, want 40s (exponential)", d)
	}
}

// TestImmediateRace: two node instances see the same unowned Immediate claim; after its
// delay each tries to take it, exactly one wins with its node in selected-node, the loser
// backs off longer and then leaves the claim alone.
func TestImmediateRace(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(testClaim(""))
	// The fake tracker does not check resourceVersion: refuse a stale update as the API
	// server's optimistic concurrency would.
	cs.PrependReactor("update", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		upd := a.(k8stesting.UpdateAction).GetObject().(*corev1.PersistentVolumeClaim)
		cur, err := cs.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, upd.Namespace, upd.Name)
		if err != nil {
			return true, nil, err
		}
		if cur.(*corev1.PersistentVolumeClaim).ResourceVersion != upd.ResourceVersion {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, upd.Name, errors.New("the object has been modified"))
		}
		upd = upd.DeepCopy()
		upd.ResourceVersion = "2"
		return true, upd, cs.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, upd, upd.Namespace)
	})
	now := time.Unix(1000, 0)
	a, b := nodeController(cs, "node-a", &now), nodeController(cs, "node-b", &now)
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Provisioner: driverName, VolumeBindingMode: &immediate}
	stale := testClaim("")
	for _, c := range []*Controller{a, b} {
		_ = c.claims.Add(stale)
		if mine, err := c.checkNode(ctx, stale, class); mine || retryDelay(t, err) < 20*time.Second {
			t.Fatalf("%s: first look must wait at least the base delay; mine=%v err=%v", c.cfg.Node.NodeName, mine, err)
		}
	}
	now = now.Add(31 * time.Second) // past both jittered delays (at most 1.5×base)
	if mine, err := a.checkNode(ctx, stale, class); mine || err != nil {
		t.Fatalf("node-a: taking the claim: mine=%v err=%v", mine, err)
	}
	// node-b's cache still shows the claim unowned: its update conflicts.
	d := retryDelay(t, func() error { _, err := b.checkNode(ctx, stale, class); return err }())
	if d < 40*time.Second {
		t.Errorf("loser's next delay %s, want the doubled delay (>= 40s)", d)
	}
	got, err := cs.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sel := got.Annotations[pvspec.AnnSelectedNode]; sel != "node-a" {
		t.Fatalf("selected-node = %q, want node-a (the winner)", sel)
	}
	// The updated claim reaches both caches: node-a provisions, node-b leaves it.
	for _, c := range []*Controller{a, b} {
		_ = c.claims.Update(got)
	}
	if mine, err := a.checkNode(ctx, got, class); !mine || err != nil {
		t.Errorf("node-a after winning: mine=%v err=%v, want true", mine, err)
	}
	if mine, err := b.checkNode(ctx, got, class); mine || err != nil {
		t.Errorf("node-b after losing: mine=%v err=%v, want false", mine, err)
	}
}
