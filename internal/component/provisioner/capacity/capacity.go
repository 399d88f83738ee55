// Package capacity publishes CSIStorageCapacity objects, one per topology segment and
// StorageClass of this driver, with what CSI GetCapacity reports, and keeps them current:
// it re-polls every --capacity-poll-interval and whenever a class, a node or a CSINode
// changes, and deletes objects that no longer match a segment and class. Objects are named
// and labelled as external-provisioner's, so the scheduler and tools see no difference.
package capacity

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/provisioner/params"
	"github.com/kubevol/kubevol/internal/runtime/controller"
	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// Labels on every CSIStorageCapacity object, as upstream.
const (
	LabelDriverName = "csi.storage.k8s.io/drivername"
	LabelManagedBy  = "csi.storage.k8s.io/managed-by"
	ManagedBy       = "external-provisioner"
)

// Options are the --enable-capacity and --capacity-* flags.
type Options struct {
	Enabled             bool
	ForImmediateBinding bool
	PollInterval        time.Duration
	// OwnerrefLevel: -1 none, 0 the pod, 1 its controller (ReplicaSet, StatefulSet,
	// DaemonSet), 2 that one's controller (Deployment).
	OwnerrefLevel int
	// Namespace holds the objects (the NAMESPACE env var upstream).
	Namespace string
	// PodName is the POD_NAME env var, needed when OwnerrefLevel >= 0.
	PodName string
}

// Config is everything the capacity controller needs.
type Config struct {
	// ControllerConfig is the client (its own, throttled by --kube-api-capacity-qps), the
	// driver and its name, and the retry intervals; one worker does all the work.
	sidecar.ControllerConfig
	Options  Options
	Topology bool
	Classes  storageinformers.StorageClassInformer
	Nodes    coreinformers.NodeInformer
	CSINodes storageinformers.CSINodeInformer
	// NodeSegment, when set, is the one segment this instance reports (upstream's node
	// deployment: the topology of the driver's NodeGetInfo, no Node or CSINode watch);
	// ManagedBy then names the instance in the managed-by label.
	NodeSegment map[string]string
	ManagedBy   string
}

// Controller is the capacity controller. All work is one level-triggered item, "sync":
// compute the desired objects from the current classes and segments and converge to them.
type Controller struct {
	cfg    Config
	queue  *controller.Queue[string]
	synced []cache.InformerSynced
	// owner is looked up by the first sync, once the caches have synced.
	ownerOnce sync.Once
	owner     *metav1.OwnerReference
}

const syncKey = "sync"

// New wires the controller to its informers.
func New(cfg Config) (*Controller, error) {
	if cfg.Options.Namespace == "" {
		return nil, sidecar.Invalid("Options.Namespace", "{Options.Namespace} is required: the namespace for CSIStorageCapacity objects (the NAMESPACE environment variable)")
	}
	c := &Controller{
		cfg:    cfg,
		queue:  sidecar.NewQueue[string](&cfg.ControllerConfig, "csistoragecapacity"),
		synced: []cache.InformerSynced{cfg.Classes.Informer().HasSynced, cfg.Nodes.Informer().HasSynced, cfg.CSINodes.Informer().HasSynced},
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.queue.Add(syncKey) },
		UpdateFunc: func(any, any) { c.queue.Add(syncKey) },
		DeleteFunc: func(any) { c.queue.Add(syncKey) },
	}
	for _, inf := range []cache.SharedIndexInformer{cfg.Classes.Informer(), cfg.Nodes.Informer(), cfg.CSINodes.Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Register adds the controller to r: one worker converges the objects, on every change of
// a class, a node or a CSINode and every poll interval.
func (c *Controller) Register(r *controller.Runner) {
	r.AddSource(controller.Synced(c.synced...))
	r.Every(c.cfg.Options.PollInterval, func(context.Context) { c.queue.Add(syncKey) })
	controller.Handle(r, c.queue, 1, func(ctx context.Context, _ string) error {
		logger := klog.FromContext(ctx).WithName("capacity")
		ctx = klog.NewContext(ctx, logger)
		c.ownerOnce.Do(func() { c.findOwner(ctx) })
		err := c.sync(ctx)
		if err != nil {
			logger.Error(err, "Updating CSIStorageCapacity objects failed; will retry")
		}
		return err
	})
}

// Run runs the controller alone, on informers the caller starts, until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	r := controller.NewRunner("capacity")
	c.Register(r)
	_ = r.Run(ctx)
}

// findOwner finds the owner of the objects; without one they are created ownerless.
func (c *Controller) findOwner(ctx context.Context) {
	if c.cfg.Options.OwnerrefLevel < 0 {
		return
	}
	owner, err := lookupOwner(ctx, c.cfg.Client, c.cfg.Options.Namespace, c.cfg.Options.PodName, c.cfg.Options.OwnerrefLevel)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot determine the owner of the CSIStorageCapacity objects; creating them without one")
	}
	c.owner = owner
}

type want struct {
	segment map[string]string
	class   *storagev1.StorageClass
}

func (w want) key() string { return w.class.Name + "|" + segmentString(w.segment) }

func segmentString(s map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(s)) {
		b.WriteString(k + "=" + s[k] + ",")
	}
	return b.String()
}

func (c *Controller) segments() ([]map[string]string, error) {
	if c.cfg.NodeSegment != nil {
		return []map[string]string{c.cfg.NodeSegment}, nil
	}
	if !c.cfg.Topology {
		return []map[string]string{nil}, nil // one object for the whole cluster
	}
	csiNodes, err := c.cfg.CSINodes.Lister().List(labels.Everything())
	if err != nil {
		return nil, err
	}
	seen := map[string]map[string]string{}
	for _, cn := range csiNodes {
		for _, d := range cn.Spec.Drivers {
			if d.Name != c.cfg.DriverName || len(d.TopologyKeys) == 0 {
				continue
			}
			node, err := c.cfg.Nodes.Lister().Get(cn.Name)
			if err != nil {
				continue
			}
			seg := map[string]string{}
			for _, k := range d.TopologyKeys {
				if v, ok := node.Labels[k]; ok {
					seg[k] = v
				}
			}
			if len(seg) == len(d.TopologyKeys) { // nodes without all labels wait for an update
				seen[segmentString(seg)] = seg
			}
		}
	}
	return slices.Collect(maps.Values(seen)), nil
}

func (c *Controller) sync(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	classes, err := c.cfg.Classes.Lister().List(labels.Everything())
	if err != nil {
		return err
	}
	segs, err := c.segments()
	if err != nil {
		return err
	}
	desired := map[string]want{}
	for _, sc := range classes {
		late := sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
		if sc.Provisioner != c.cfg.DriverName || (!late && !c.cfg.Options.ForImmediateBinding) {
			continue
		}
		for _, s := range segs {
			w := want{segment: s, class: sc}
			desired[w.key()] = w
		}
	}
	api := c.cfg.Client.StorageV1().CSIStorageCapacities(c.cfg.Options.Namespace)
	existing, err := api.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(c.labels()).String()})
	if err != nil {
		return err
	}
	have := map[string]*storagev1.CSIStorageCapacity{}
	for i := range existing.Items {
		o := &existing.Items[i]
		var seg map[string]string
		if o.NodeTopology != nil && len(o.NodeTopology.MatchLabels) > 0 {
			seg = o.NodeTopology.MatchLabels
		}
		k := o.StorageClassName + "|" + segmentString(seg)
		if _, dup := have[k]; dup || desired[k].class == nil {
			if err := api.Delete(ctx, o.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			logger.V(2).Info("Deleted obsolete CSIStorageCapacity", "csiStorageCapacity", klog.KObj(o))
			continue
		}
		have[k] = o
	}
	for k, w := range desired {
		if err := c.syncOne(ctx, w, have[k]); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) labels() map[string]string {
	if c.cfg.ManagedBy != "" {
		return map[string]string{LabelDriverName: c.cfg.DriverName, LabelManagedBy: c.cfg.ManagedBy}
	}
	return map[string]string{LabelDriverName: c.cfg.DriverName, LabelManagedBy: ManagedBy}
}

// NodeManagedBy is the managed-by value of a node deployment's objects, as upstream:
// "external-provisioner-<node>", cut to a label's 63 characters with a hash of the rest.
func NodeManagedBy(node string) string {
	name := ManagedBy + "-" + node
	if len(name) <= 63 {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	sum := fmt.Sprintf("%08x", h.Sum32())
	return name[:63-len(sum)-1] + "-" + sum
}

func (c *Controller) syncOne(ctx context.Context, w want, cur *storagev1.CSIStorageCapacity) error {
	// Upstream sends the unstripped class parameters here but stripped ones to CreateVolume;
	// the driver should see the same parameters in both.
	p, err := params.Interpret(w.class.Parameters, "", nil)
	if err != nil {
		return fmt.Errorf("StorageClass %s: %w", w.class.Name, err)
	}
	req := &csi.GetCapacityRequest{Parameters: p.Parameters}
	if len(w.segment) > 0 {
		req.AccessibleTopology = &csi.Topology{Segments: w.segment}
	}
	cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
	rsp, err := c.cfg.CSI.Controller.GetCapacity(cctx, req)
	cancel()
	if err != nil {
		return fmt.Errorf("GetCapacity for class %s segment %v: %w", w.class.Name, w.segment, err)
	}
	capQ := resource.NewQuantity(nonNegative(ctx, "available_capacity", rsp.GetAvailableCapacity(), w), resource.BinarySI)
	var maxQ *resource.Quantity
	if m := rsp.GetMaximumVolumeSize(); m != nil {
		maxQ = resource.NewQuantity(nonNegative(ctx, "maximum_volume_size", m.GetValue(), w), resource.BinarySI)
	}
	api := c.cfg.Client.StorageV1().CSIStorageCapacities(c.cfg.Options.Namespace)
	if cur == nil {
		o := &storagev1.CSIStorageCapacity{
			ObjectMeta:        metav1.ObjectMeta{GenerateName: "csisc-", Labels: c.labels()},
			StorageClassName:  w.class.Name,
			NodeTopology:      &metav1.LabelSelector{MatchLabels: w.segment},
			Capacity:          capQ,
			MaximumVolumeSize: maxQ,
		}
		if c.owner != nil {
			o.OwnerReferences = []metav1.OwnerReference{*c.owner}
		}
		_, err := api.Create(ctx, o, metav1.CreateOptions{})
		return err
	}
	if quantityEqual(cur.Capacity, capQ) && quantityEqual(cur.MaximumVolumeSize, maxQ) && c.ownerOK(cur) {
		return nil
	}
	upd := cur.DeepCopy()
	upd.Capacity, upd.MaximumVolumeSize = capQ, maxQ
	if c.owner != nil {
		upd.OwnerReferences = []metav1.OwnerReference{*c.owner}
	}
	_, err = api.Update(ctx, upd, metav1.UpdateOptions{})
	return err
}

// nonNegative is b, or 0 with an error log when a driver reports a negative size (an
// overflowed pool): the API server would refuse it, and no capacity is the safe reading.
// Upstream publishes the value as it is.
func nonNegative(ctx context.Context, field string, b int64, w want) int64 {
	if b >= 0 {
		return b
	}
	klog.FromContext(ctx).Error(nil, "GetCapacity reported a negative size; publishing 0", "field", field, "bytes", b, "storageClass", w.class.Name, "segment", w.segment)
	return 0
}

func (c *Controller) ownerOK(o *storagev1.CSIStorageCapacity) bool {
	if c.owner == nil {
		return true
	}
	return len(o.OwnerReferences) == 1 && o.OwnerReferences[0].UID == c.owner.UID
}

func quantityEqual(a, b *resource.Quantity) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Cmp(*b) == 0
}

// lookupOwner walks up the controller owner references from the pod, level steps.
func lookupOwner(ctx context.Context, client kubernetes.Interface, ns, pod string, level int) (*metav1.OwnerReference, error) {
	if pod == "" {
		return nil, fmt.Errorf("OwnerrefLevel %d needs PodName, the POD_NAME environment variable", level)
	}
	p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	t := true
	ref := &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: &t}
	owners := p.OwnerReferences
	for i := 0; i < level; i++ {
		ctl := metav1.GetControllerOfNoCopy(&metav1.ObjectMeta{OwnerReferences: owners})
		if ctl == nil {
			return nil, fmt.Errorf("%s %s has no controller at owner level %d", ref.Kind, ref.Name, i+1)
		}
		ref = ctl.DeepCopy()
		if i+1 < level {
			if ctl.Kind != "ReplicaSet" {
				return nil, fmt.Errorf("owner level %d: cannot look up the owner of %s %s", i+2, ctl.Kind, ctl.Name)
			}
			rs, err := client.AppsV1().ReplicaSets(ns).Get(ctx, ctl.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			owners = rs.OwnerReferences
		}
	}
	return ref, nil
}
