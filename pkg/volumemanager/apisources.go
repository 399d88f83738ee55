package volumemanager

import (
	"context"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubevol/kubevol/pkg/volumemanager/internal/objectwatch"
)

// apiObjects is the default ObjectSource: the kubelet's watch-based ConfigMap and Secret
// managers, and plain GETs for the rest (the kubelet's populator and CSI plugin).
type apiObjects struct {
	client     kubernetes.Interface
	configMaps *objectwatch.Watcher
	secrets    *objectwatch.Watcher
	changed    func(ObjectRef)
	started    chan struct{}
}

// NewAPIObjectSource reads objects from the API server with client, as a kubelet does:
// each referenced ConfigMap and Secret through its own list/watch (a metadata.name field
// selector, which the Node authorizer accepts for an object one of the node's pods
// references), shared by every pod that references it and stopped when the last one goes;
// claims, volumes, VolumeAttachments and CSI secrets by GET. It needs no list or watch of
// any collection, so it works with a system:node:<name> credential and nothing else, and
// with any broader one.
func NewAPIObjectSource(client kubernetes.Interface) ObjectSource {
	s := &apiObjects{client: client, started: make(chan struct{})}
	s.configMaps = s.watcher(KindConfigMap, &v1.ConfigMap{}, func(ns string) (cache.ListWithContextFunc, watchFunc) {
		c := client.CoreV1().ConfigMaps(ns)
		return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }, c.Watch
	})
	s.secrets = s.watcher(KindSecret, &v1.Secret{}, func(ns string) (cache.ListWithContextFunc, watchFunc) {
		c := client.CoreV1().Secrets(ns)
		return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }, c.Watch
	})
	return s
}

// immutable reports a ConfigMap or Secret with immutable: true.
func immutable(obj runtime.Object) bool {
	switch o := obj.(type) {
	case *v1.ConfigMap:
		return o.Immutable != nil && *o.Immutable
	case *v1.Secret:
		return o.Immutable != nil && *o.Immutable
	}
	return false
}

type watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error)

// watcher keeps the objects of kind fresh, one list/watch per object; of returns the list
// and watch calls of a namespace.
func (s *apiObjects) watcher(kind ObjectKind, obj runtime.Object, of func(namespace string) (cache.ListWithContextFunc, watchFunc)) *objectwatch.Watcher {
	return objectwatch.New(objectwatch.Config{
		// Singular, as the kubelet's managers (and the listers) name them: errors read
		// `configmap "x" not found`.
		Resource:   v1.Resource(strings.ToLower(string(kind))),
		ObjectType: obj,
		ListerWatcher: func(k objectwatch.Key) cache.ListerWatcher {
			list, watchFn := of(k.Namespace)
			return singleObject(s.client, k.Name, list, watchFn)
		},
		Changed:   func(k objectwatch.Key) { s.notify(kind, k) },
		Transform: stripManagedFields,
		Immutable: immutable,
	})
}

// singleObject is the list/watch of one object by name. It streams the first list through
// a watch where the client supports it (client-go's watch-list), as the kubelet does. A
// refused call is retried at once with the claims' backoff (refusedRetry).
func singleObject(client any, name string, list cache.ListWithContextFunc, watchFn watchFunc) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return retryRefused(ctx, refusedRetry, func() (runtime.Object, error) { return list(ctx, o) })
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return retryRefused(ctx, refusedRetry, func() (watch.Interface, error) { return watchFn(ctx, o) })
		},
	}, client)
}

// refusedRetry is how long retryRefused retries a refused list or watch before handing the
// error to the reflector.
const refusedRetry = 30 * time.Second

// retryRefused calls f until it is not refused (403), for at most limit, from
// claimBackoff.base doubling to claimBackoff.max, and returns its last result. A node's
// read of an object that its new pod references is refused until the API server's node
// graph has the pod; left to the reflector, each refusal would double its wait from 800 ms
// up to 30 s, so that a graph that lags by a few seconds under a burst of bindings (many
// nodes' pods bound at once) would delay the mount by tens of seconds.
func retryRefused[T any](ctx context.Context, limit time.Duration, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(limit)
	delay := claimBackoff.base
	for {
		out, err := f()
		if !apierrors.IsForbidden(err) || time.Now().Add(delay).After(deadline) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(delay):
		}
		delay = min(2*delay, claimBackoff.max)
	}
}

func (s *apiObjects) Start(ctx context.Context, changed func(ObjectRef)) {
	s.changed = changed
	close(s.started)
	s.configMaps.Start(ctx)
	s.secrets.Start(ctx)
}

func (s *apiObjects) notify(kind ObjectKind, k objectwatch.Key) {
	select {
	case <-s.started:
		s.changed(ObjectRef{Kind: kind, Namespace: k.Namespace, Name: k.Name})
	default:
	}
}

func (s *apiObjects) SetPodObjects(pod types.UID, refs []ObjectRef) {
	var cms, secs []objectwatch.Key
	for _, r := range refs {
		switch r.Kind {
		case KindConfigMap:
			cms = append(cms, objectwatch.Key{Namespace: r.Namespace, Name: r.Name})
		case KindSecret:
			secs = append(secs, objectwatch.Key{Namespace: r.Namespace, Name: r.Name})
		}
	}
	s.configMaps.Set(string(pod), cms)
	s.secrets.Set(string(pod), secs)
}

func (s *apiObjects) GetConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	obj, err := s.configMaps.Get(namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*v1.ConfigMap), nil
}

func (s *apiObjects) GetSecret(namespace, name string) (*v1.Secret, error) {
	obj, err := s.secrets.Get(namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*v1.Secret), nil
}

func (s *apiObjects) FetchSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return s.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (s *apiObjects) GetClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return s.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (s *apiObjects) GetVolume(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	return s.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

func (s *apiObjects) GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	return s.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
}

func (s *apiObjects) Watches() map[ObjectKind]int {
	return map[ObjectKind]int{KindConfigMap: s.configMaps.Len(), KindSecret: s.secrets.Len()}
}

// apiPods is the default PodSource: an informer on the node's pods.
type apiPods struct {
	factory informers.SharedInformerFactory
	inf     cache.SharedIndexInformer
	lister  corelisters.PodLister
}

// NewAPIPodSource watches the pods bound to nodeName (a spec.nodeName field selector, the
// only pod list a node may make), as the kubelet's API pod source does.
func NewAPIPodSource(client kubernetes.Interface, nodeName string) PodSource {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(stripManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}))
	pods := f.Core().V1().Pods()
	return &apiPods{factory: f, inf: pods.Informer(), lister: pods.Lister()}
}

func (p *apiPods) AddEventHandler(h cache.ResourceEventHandler) error {
	_, err := p.inf.AddEventHandler(h)
	return err
}

func (p *apiPods) Start(ctx context.Context) {
	p.factory.Start(ctx.Done())
	go func() { <-ctx.Done(); p.factory.Shutdown() }()
}

func (p *apiPods) HasSynced() bool { return p.inf.HasSynced() }

func (p *apiPods) GetPod(namespace, name string) (*v1.Pod, error) {
	return p.lister.Pods(namespace).Get(name)
}

func (p *apiPods) ListPods() ([]*v1.Pod, error) { return p.lister.List(labels.Everything()) }
