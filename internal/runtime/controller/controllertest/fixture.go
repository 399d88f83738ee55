// Package controllertest is the unit-test fixture of kubevol's controllers, in the shape of
// client-go's sample-controller controller_test.go: a fake clientset holds the objects, the
// informers' indexers are filled from its store and never started, the test calls a
// controller's sync function with one key at a time, and then checks the API actions the
// sync took and the events it recorded. A sync therefore runs exactly once, on exactly the
// cache the test set up, with no worker, no watch and nothing to wait for.
//
// The clientset has internal/testing/kubefake's resourceVersion semantics: every write stores a
// new resourceVersion, and an update or patch that carries a stale one is refused with a
// conflict, as the apiserver refuses it. A controller that writes from a stale cache fails
// its test.
//
// Feed copies the store into the indexers, as an informer's relist would, without calling
// the event handlers: a sync sees what the API has, and a test that needs an event handler
// to run calls it itself (or is an informer-level test that runs the controller).
package controllertest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kubevol/kubevol/internal/testing/kubefake"
)

// Fixture is one controller's fake API, informers and event recorder.
type Fixture struct {
	T testing.TB
	// Ctx ends with the test.
	Ctx context.Context
	// Client is the fake API server, with kubefake's resourceVersions.
	Client *fake.Clientset
	// Informers is the factory whose informers the controller under test reads; it is
	// never started, Feed fills its indexers.
	Informers informers.SharedInformerFactory
	// Recorder records the controller's events, read by ExpectEvents.
	Recorder *record.FakeRecorder
}

// fed are the informers Feed fills: every kind a kubevol controller reads through a
// core or storage lister.
var fed = []struct {
	gvr      schema.GroupVersionResource
	kind     string
	informer func(informers.SharedInformerFactory) cache.SharedIndexInformer
}{
	{corev("persistentvolumes"), "PersistentVolume", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().PersistentVolumes().Informer()
	}},
	{corev("persistentvolumeclaims"), "PersistentVolumeClaim", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().PersistentVolumeClaims().Informer()
	}},
	{corev("nodes"), "Node", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Nodes().Informer()
	}},
	{corev("pods"), "Pod", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Pods().Informer()
	}},
	{storagev("volumeattachments"), "VolumeAttachment", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Storage().V1().VolumeAttachments().Informer()
	}},
	{storagev("storageclasses"), "StorageClass", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Storage().V1().StorageClasses().Informer()
	}},
	{storagev("csinodes"), "CSINode", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Storage().V1().CSINodes().Informer()
	}},
	{storagev("volumeattributesclasses"), "VolumeAttributesClass", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Storage().V1().VolumeAttributesClasses().Informer()
	}},
}

func corev(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Version: "v1", Resource: resource}
}

func storagev(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: resource}
}

// New returns a fixture whose API holds objects, each created through the client so that
// it has a resourceVersion, and whose indexers are fed. The recorder buffers 100 events.
func New(t testing.TB, objects ...runtime.Object) *Fixture {
	t.Helper()
	f := &Fixture{T: t, Ctx: t.Context(), Client: fake.NewClientset(), Recorder: record.NewFakeRecorder(100)}
	kubefake.WithResourceVersions(f.Client)
	f.Informers = informers.NewSharedInformerFactory(f.Client, 0)
	f.Add(objects...)
	return f
}

// Add creates objects in the API, as a user would, then feeds the indexers and forgets
// the create actions.
func (f *Fixture) Add(objects ...runtime.Object) {
	f.T.Helper()
	for _, obj := range objects {
		gvks, _, err := scheme.Scheme.ObjectKinds(obj)
		if err != nil {
			f.T.Fatalf("controllertest: %T: %v", obj, err)
		}
		gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
		m, err := meta.Accessor(obj)
		if err != nil {
			f.T.Fatal(err)
		}
		if _, err := f.Client.Invokes(clienttesting.NewCreateAction(gvr, m.GetNamespace(), obj.DeepCopyObject()), nil); err != nil {
			f.T.Fatalf("controllertest: create %s %s: %v", gvr.Resource, m.GetName(), err)
		}
	}
	f.Feed()
	f.Client.ClearActions()
}

// Feed replaces the content of every indexer with the objects the API holds now, as an
// informer's relist would, without calling event handlers.
func (f *Fixture) Feed() {
	f.T.Helper()
	for _, k := range fed {
		list, err := f.Client.Tracker().List(k.gvr, k.gvr.GroupVersion().WithKind(k.kind), "")
		if err != nil {
			f.T.Fatalf("controllertest: list %s: %v", k.gvr.Resource, err)
		}
		objs, err := meta.ExtractList(list)
		if err != nil {
			f.T.Fatal(err)
		}
		items := make([]any, len(objs))
		for i, o := range objs {
			items[i] = o
		}
		if err := k.informer(f.Informers).GetIndexer().Replace(items, ""); err != nil {
			f.T.Fatal(err)
		}
	}
}

// Sync feeds the indexers, forgets the actions taken so far and calls sync with key once,
// as sample-controller's runController calls syncHandler. It returns sync's error.
func Sync[K any](f *Fixture, sync func(context.Context, K) error, key K) error {
	f.T.Helper()
	f.Feed()
	f.Client.ClearActions()
	return sync(f.Ctx, key)
}

// Actions are the API actions taken since the last Sync or Expect, each "verb resource" or
// "verb resource/subresource", with lists and watches left out (sample-controller's
// filterInformerActions).
func (f *Fixture) Actions() []string {
	var out []string
	for _, a := range f.Client.Actions() {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		s := a.GetVerb() + " " + a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			s += "/" + sub
		}
		out = append(out, s)
	}
	return out
}

// ExpectActions fails the test unless the actions taken since the last Sync or Expect
// are want, in order; then forgets them.
func (f *Fixture) ExpectActions(want ...string) {
	f.T.Helper()
	if got := f.Actions(); !slices.Equal(got, want) {
		f.T.Errorf("actions:\n got  %q\n want %q", got, want)
	}
	f.Client.ClearActions()
}

// Events drains the events recorded so far, each "Type Reason Message".
func (f *Fixture) Events() []string {
	var out []string
	for {
		select {
		case ev := <-f.Recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// ExpectEvents fails the test unless the events recorded since the last call are want, in
// order, each given as the start of the event ("Warning AttachFailed", or with the start of
// its message); then forgets them.
func (f *Fixture) ExpectEvents(want ...string) {
	f.T.Helper()
	got := f.Events()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		f.T.Errorf("events:\n got  %q\n want %q", got, want)
	}
}
