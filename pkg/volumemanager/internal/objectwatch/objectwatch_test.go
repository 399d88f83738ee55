package objectwatch

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// fixture watches Secrets of a fake clientset, one object per list/watch as a node's
// credential allows (the fake ignores field selectors, so the test filters by name).
type fixture struct {
	t       *testing.T
	client  *fake.Clientset
	w       *Watcher
	mu      sync.Mutex
	changes map[Key]int
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	f := &fixture{t: t, client: fake.NewClientset(objs...), changes: map[Key]int{}}
	f.w = New(Config{
		Resource:   v1.Resource("secrets"),
		ObjectType: &v1.Secret{},
		ListerWatcher: func(k Key) cache.ListerWatcher {
			c := f.client.CoreV1().Secrets(k.Namespace)
			return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					l, err := c.List(ctx, o)
					if err != nil {
						return nil, err
					}
					var keep []v1.Secret
					for _, s := range l.Items {
						if s.Name == k.Name {
							keep = append(keep, s)
						}
					}
					l.Items = keep
					return l, nil
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					w, err := c.Watch(ctx, o)
					if err != nil {
						return nil, err
					}
					return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
						s, ok := e.Object.(*v1.Secret)
						return e, !ok || s.Name == k.Name
					}), nil
				},
			}, f.client)
		},
		Changed: func(k Key) {
			f.mu.Lock()
			f.changes[k]++
			f.mu.Unlock()
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.w.Start(ctx)
	return f
}

func secret(name, value string) *v1.Secret {
	return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{"k": []byte(value)}}
}

// eventually polls get until it returns the value want ("" for NotFound).
func (f *fixture) eventually(name, want string) {
	f.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		obj, err := f.w.Get("ns", name)
		switch {
		case apierrors.IsNotFound(err):
			last = ""
		case err != nil:
			last = "error: " + err.Error()
		default:
			last = string(obj.(*v1.Secret).Data["k"])
		}
		return last == want, nil
	})
	if err != nil {
		f.t.Fatalf("secret %s = %q, want %q", name, last, want)
	}
}

func TestSharedWatchesFollowReferences(t *testing.T) {
	f := newFixture(t, secret("a", "1"), secret("b", "1"), secret("unrelated", "x"))
	f.w.Set("pod1", []Key{{"ns", "a"}, {"ns", "b"}, {"ns", "a"}})
	f.w.Set("pod2", []Key{{"ns", "a"}})
	if got := f.w.Len(); got != 2 {
		t.Fatalf("watches = %d, want 2 (distinct objects referenced)", got)
	}
	f.eventually("a", "1")
	f.eventually("b", "1")
	if _, err := f.w.Get("ns", "unrelated"); err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("Get of an unreferenced object = %v, want a not-registered error", err)
	}
	for _, k := range f.w.Cached() {
		if k.Name != "a" && k.Name != "b" {
			t.Errorf("cache holds %v, which no holder references", k)
		}
	}

	// A live update reaches Get and Changed.
	if _, err := f.client.CoreV1().Secrets("ns").Update(context.Background(), secret("a", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("a", "2")

	// The last reference going stops the watch; a shared one stays.
	f.w.Set("pod1", nil)
	if got := f.w.Len(); got != 1 {
		t.Fatalf("watches after pod1 left = %d, want 1", got)
	}
	if _, err := f.w.Get("ns", "b"); err == nil {
		t.Fatal("b is still served after its last reference went")
	}
	f.eventually("a", "2")
	f.w.Set("pod2", nil)
	if got := f.w.Len(); got != 0 {
		t.Fatalf("watches after every pod left = %d, want 0", got)
	}
}

// An object that does not exist yet is NotFound, then found once created; one deleted and
// created again under the same name is served again.
func TestMissingDeletedAndRecreated(t *testing.T) {
	f := newFixture(t)
	f.w.Set("pod", []Key{{"ns", "s"}})
	f.eventually("s", "")
	secrets := f.client.CoreV1().Secrets("ns")
	ctx := context.Background()
	if _, err := secrets.Create(ctx, secret("s", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("s", "1")
	if err := secrets.Delete(ctx, "s", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("s", "")
	if _, err := secrets.Create(ctx, secret("s", "2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("s", "2")
	f.mu.Lock()
	defer f.mu.Unlock()
	// sync, create, delete, create
	if got := f.changes[Key{"ns", "s"}]; got < 4 {
		t.Errorf("Changed called %d times, want at least 4", got)
	}
}

// An immutable object's watch stops once Get has seen it; the copy is still served.
func TestImmutableStopsItsWatch(t *testing.T) {
	yes := true
	s := secret("frozen", "1")
	s.Immutable = &yes
	f := newFixture(t, s)
	f.w.cfg.Immutable = func(obj runtime.Object) bool { o := obj.(*v1.Secret); return o.Immutable != nil && *o.Immutable }
	f.w.Set("pod", []Key{{"ns", "frozen"}})
	f.eventually("frozen", "1")
	if got := f.w.Len(); got != 0 {
		t.Errorf("watches after reading an immutable object = %d, want 0", got)
	}
	f.eventually("frozen", "1")
	f.w.Set("pod", nil)
	if _, err := f.w.Get("ns", "frozen"); err == nil {
		t.Error("an immutable object is still served after its last holder let go")
	}
}
