package write

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/kubevol/kubevol/internal/runtime/controller"
)

func claim() *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "u1", ResourceVersion: "1", Finalizers: []string{"other"}}}
}

// verbs records the verb and subresource of every write the clientset receives. The
// reactor is added before anything runs.
func verbs(cs *fake.Clientset) *[]string {
	var got []string
	cs.PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			got = append(got, strings.TrimSuffix(v+" "+a.GetResource().Resource+"/"+a.GetSubresource(), "/"))
		}
		return false, nil, nil
	})
	return &got
}

func TestSetFinalizerUsesTheRolesVerb(t *testing.T) {
	ctx := context.Background()
	for _, verb := range []Verb{Update, Patch} {
		t.Run(string(verb), func(t *testing.T) {
			cs := fake.NewClientset(claim())
			got := verbs(cs)
			w := Claims(cs, verb, verb)
			out, err := w.SetFinalizer(ctx, claim(), "mine", true)
			if err != nil || len(out.Finalizers) != 2 || out.Finalizers[1] != "mine" {
				t.Fatalf("add: %v, %v", out.Finalizers, err)
			}
			if again, err := w.SetFinalizer(ctx, out, "mine", true); err != nil || again != out {
				t.Fatalf("a finalizer present already was written again: %v", err)
			}
			out, err = w.SetFinalizer(ctx, out, "mine", false)
			if err != nil || len(out.Finalizers) != 1 || out.Finalizers[0] != "other" {
				t.Fatalf("remove: %v, %v", out.Finalizers, err)
			}
			if len(*got) != 2 || (*got)[0] != string(verb)+" persistentvolumeclaims" {
				t.Errorf("writes %v, want two %ss", *got, verb)
			}
		})
	}
}

// A patch never undoes another writer's finalizer: it carries a list directive.
func TestPatchedFinalizerKeepsOthers(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(claim())
	stale := claim()
	stale.Finalizers = nil // the cache has not seen "other"
	out, err := Claims(cs, Patch, Patch).SetFinalizer(ctx, stale, "mine", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Finalizers) != 2 {
		t.Errorf("finalizers %v, want other and mine", out.Finalizers)
	}
}

// Checked patches carry the resourceVersion read; unchecked ones do not.
func TestCheckedPatchCarriesTheVersion(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(claim())
	var patches []map[string]any
	cs.PrependReactor("patch", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		var p map[string]any
		_ = json.Unmarshal(a.(clienttesting.PatchAction).GetPatch(), &p)
		patches = append(patches, p)
		return false, nil, nil
	})
	w := Claims(cs, Patch, Patch)
	old := claim()
	cur := old.DeepCopy()
	cur.Status.Phase = corev1.ClaimBound
	if _, err := w.WriteStatus(ctx, old, cur, Checked()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteStatus(ctx, old, cur); err != nil {
		t.Fatal(err)
	}
	if len(patches) != 2 {
		t.Fatalf("%d patches, want 2", len(patches))
	}
	md, _ := patches[0]["metadata"].(map[string]any)
	if md["resourceVersion"] != "1" {
		t.Errorf("checked patch %v lacks resourceVersion 1", patches[0])
	}
	if md, _ := patches[1]["metadata"].(map[string]any); md["resourceVersion"] != nil {
		t.Errorf("unchecked patch %v carries a resourceVersion", patches[1])
	}
	if _, err := w.WriteStatus(ctx, old, old.DeepCopy()); err != nil || len(patches) != 2 {
		t.Errorf("an unchanged object was written (%v)", err)
	}
}

// Reread repeats the change on a fresh GET after a conflict, and a replaced object is gone.
func TestRereadRetriesAConflictFromAFreshRead(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(claim())
	var conflicts atomic.Int32
	cs.PrependReactor("update", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if conflicts.Add(1) == 1 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "data", errors.New("stale"))
		}
		return false, nil, nil
	})
	out, err := ClaimFinalizers(cs).SetFinalizer(ctx, claim(), "mine", true)
	if err != nil || len(out.Finalizers) != 2 || conflicts.Load() != 2 {
		t.Fatalf("finalizers %v, err %v after %d updates", out.Finalizers, err, conflicts.Load())
	}
	conflicts.Store(0)
	replaced := claim()
	replaced.UID = "u0"
	if _, err := ClaimFinalizers(cs).SetFinalizer(ctx, replaced, "again", true); !apierrors.IsNotFound(err) {
		t.Errorf("a replaced claim: %v, want NotFound", err)
	}
	// Without Reread, the conflict is the caller's.
	conflicts.Store(0)
	if _, err := Claims(cs, Update, Update).SetFinalizer(ctx, claim(), "third", true); !apierrors.IsConflict(err) {
		t.Errorf("without Reread: %v, want the conflict", err)
	}
}

// A refused write is reported once through controller.WriteFailed, on the object it is for.
func TestRefusedWriteIsReported(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(claim())
	cs.PrependReactor("patch", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, "data", errors.New("RBAC"))
	})
	rec := record.NewFakeRecorder(10)
	w := Claims(cs, Patch, Patch)
	w.Recorder = rec
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	_, err := w.SetFinalizer(ctx, claim(), "mine", true, On(other), Doing("protect"))
	if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "protect: ") {
		t.Fatalf("err %v, want the wrapped refusal", err)
	}
	if len(rec.Events) != 1 {
		t.Fatalf("%d events, want 1", len(rec.Events))
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning "+controller.ReasonWriteFailed+" cannot patch persistentvolumeclaims: protect: ") {
		t.Errorf("event %q", ev)
	}
}

// Every successful write is recorded as a version written over.
func TestWritesRecordSupersededVersions(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(claim())
	// The fake tracker keeps resourceVersions as they are; the API server moves them on.
	cs.PrependReactor("update", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		out := a.(clienttesting.UpdateAction).GetObject().DeepCopyObject().(*corev1.PersistentVolumeClaim)
		out.ResourceVersion = "2"
		return true, out, nil
	})
	var s controller.Superseded[string]
	w := Claims(cs, Update, Update)
	w.Superseded = &s
	out, err := w.SetFinalizer(ctx, claim(), "mine", true)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Over("ns/data", "1") || s.Over("ns/data", out.ResourceVersion) {
		t.Errorf("written over: 1 %v, %s %v", s.Over("ns/data", "1"), out.ResourceVersion, s.Over("ns/data", out.ResourceVersion))
	}
}

// ChangeStatus reads afresh, and an error of the change ends it unwritten.
func TestChangeStatusReadsAfresh(t *testing.T) {
	ctx := context.Background()
	stored := claim()
	stored.Status.Phase = corev1.ClaimBound
	cs := fake.NewClientset(stored)
	got := verbs(cs)
	w := Claims(cs, Update, Update)
	var seen corev1.PersistentVolumeClaimPhase
	if _, err := w.ChangeStatus(ctx, claim(), func(c *corev1.PersistentVolumeClaim) error {
		seen = c.Status.Phase
		c.Status.Capacity = corev1.ResourceList{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if seen != corev1.ClaimBound || len(*got) != 1 || (*got)[0] != "update persistentvolumeclaims/status" {
		t.Errorf("change saw %q, writes %v", seen, *got)
	}
	stop := errors.New("not now")
	if _, err := w.ChangeStatus(ctx, claim(), func(*corev1.PersistentVolumeClaim) error { return stop }); !errors.Is(err, stop) || len(*got) != 1 {
		t.Errorf("err %v, writes %v", err, *got)
	}
}

func TestConflictPolicies(t *testing.T) {
	ctx := context.Background()
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "x"}, "a", errors.New("newer"))
	other := errors.New("other")
	if err := WaitForCache.Settle(ctx, conflict, "kind", "a"); err != nil {
		t.Errorf("WaitForCache: %v", err)
	}
	if err := RetrySoon.Settle(ctx, conflict, "kind", "a"); err == nil || err.Error() != controller.RetryAfter(RetrySoonAfter).Error() {
		t.Errorf("RetrySoon: %v", err)
	}
	if err := Backoff.Settle(ctx, conflict, "kind", "a"); !apierrors.IsConflict(err) {
		t.Errorf("Backoff: %v", err)
	}
	for _, c := range []Conflict{Backoff, Reread, RetrySoon, WaitForCache} {
		if err := c.Settle(ctx, other, "kind", "a"); err != other {
			t.Errorf("policy %d changed another error: %v", c, err)
		}
	}
}
