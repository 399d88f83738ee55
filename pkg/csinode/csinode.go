// Package csinode publishes what a node's CSI drivers told it, as the kubelet's
// nodeinfomanager does: the Node's csi.volume.kubernetes.io/nodeid annotation (a JSON map of
// driver to node ID), the Node's topology labels, and the CSINode object's spec.drivers
// (node ID, topology keys, allocatable volume count), which the scheduler, the provisioner and
// the attacher read.
package csinode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/migration"
)

// NodeIDAnnotation holds the JSON map of driver name to the driver's node ID.
const NodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"

// Driver is what NodeGetInfo reported.
type Driver struct {
	Name     string
	NodeID   string
	Topology map[string]string
	// MaxVolumes is max_volumes_per_node; 0 means no limit.
	MaxVolumes int64
}

// Manager keeps one node's objects current.
type Manager struct {
	Client   kubernetes.Interface
	NodeName string
}

// Install records drv on the Node and the CSINode. It is idempotent; conflicts are retried.
func (m *Manager) Install(ctx context.Context, drv Driver) error {
	node, err := m.updateNode(ctx, func(n *corev1.Node) error {
		ids, err := nodeIDs(n)
		if err != nil {
			return err
		}
		ids[drv.Name] = drv.NodeID
		setNodeIDs(n, ids)
		for k, v := range drv.Topology {
			if old, ok := n.Labels[k]; ok && old != v {
				return fmt.Errorf("node label %s=%s conflicts with driver %s's topology value %q", k, old, drv.Name, v)
			}
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels[k] = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	entry := storagev1.CSINodeDriver{Name: drv.Name, NodeID: drv.NodeID, TopologyKeys: slices.Sorted(maps.Keys(drv.Topology))}
	if drv.MaxVolumes > 0 {
		entry.Allocatable = &storagev1.VolumeNodeResources{Count: ptr(int32(min(drv.MaxVolumes, 1<<31-1)))}
	}
	return m.updateCSINode(ctx, node, func(cn *storagev1.CSINode) {
		if i := slices.IndexFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == drv.Name }); i >= 0 {
			cn.Spec.Drivers[i] = entry
		} else {
			cn.Spec.Drivers = append(cn.Spec.Drivers, entry)
		}
	})
}

// Uninstall removes the driver from the Node annotation and the CSINode. Topology labels
// stay, as the kubelet leaves them: other drivers may share a key.
func (m *Manager) Uninstall(ctx context.Context, name string) error {
	node, err := m.updateNode(ctx, func(n *corev1.Node) error {
		ids, err := nodeIDs(n)
		if err != nil {
			return err
		}
		delete(ids, name)
		setNodeIDs(n, ids)
		return nil
	})
	if err != nil {
		return err
	}
	return m.updateCSINode(ctx, node, func(cn *storagev1.CSINode) {
		cn.Spec.Drivers = slices.DeleteFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == name })
	})
}

func (m *Manager) updateNode(ctx context.Context, change func(*corev1.Node) error) (*corev1.Node, error) {
	var out *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := m.Client.CoreV1().Nodes().Get(ctx, m.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		before := n.DeepCopy()
		if err := change(n); err != nil {
			return err
		}
		if equalMeta(before, n) {
			out = n
			return nil
		}
		// A patch of the labels and annotations only, checked against the version read: an
		// UPDATE would also send the taints read, which NodeRestriction refuses ("not allowed
		// to modify taints") when the node controller changed them since, before the version
		// check could turn it into a conflict. The kubelet's nodeinfomanager patches too.
		patch, err := metaPatch(before, n)
		if err != nil {
			return err
		}
		out, err = write.Nodes(m.Client).SendPatch(ctx, before, types.MergePatchType, patch)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("update node %s: %w", m.NodeName, err)
	}
	return out, nil
}

// Initialize makes the node's CSINode exist, with the migrated-plugins annotation, before
// any driver registers: the kubelet's initializeCSINode, which the scheduler's volume
// binding relies on to know that the node mounts in-tree volumes through CSI.
func (m *Manager) Initialize(ctx context.Context) error {
	node, err := m.Client.CoreV1().Nodes().Get(ctx, m.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", m.NodeName, err)
	}
	return m.updateCSINode(ctx, node, func(*storagev1.CSINode) {})
}

// setMigratedPlugins writes the annotation that lists every in-tree plugin migrated to CSI,
// as the kubelet's nodeinfomanager does on each CSINode write: the kubelet of 1.37 lists
// all seven always, whatever drivers are registered. It reports whether it changed cn.
func setMigratedPlugins(cn *storagev1.CSINode) bool {
	want := migration.MigratedPlugins()
	if cn.Annotations[migration.MigratedPluginsAnnotation] == want {
		return false
	}
	if cn.Annotations == nil {
		cn.Annotations = map[string]string{}
	}
	cn.Annotations[migration.MigratedPluginsAnnotation] = want
	return true
}

func (m *Manager) updateCSINode(ctx context.Context, node *corev1.Node, change func(*storagev1.CSINode)) error {
	change = func(f func(*storagev1.CSINode)) func(*storagev1.CSINode) {
		return func(cn *storagev1.CSINode) { f(cn); setMigratedPlugins(cn) }
	}(change)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cn, err := m.Client.StorageV1().CSINodes().Get(ctx, m.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			// Owned by the Node, as the kubelet creates it, so it goes with the Node.
			cn = &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{
				Name: m.NodeName,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			}}
			change(cn)
			_, err = m.Client.StorageV1().CSINodes().Create(ctx, cn, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(storagev1.Resource("csinodes"), m.NodeName, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		before := cn.DeepCopy()
		change(cn)
		if equality.Semantic.DeepEqual(before, cn) {
			return nil
		}
		_, err = m.Client.StorageV1().CSINodes().Update(ctx, cn, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update CSINode %s: %w", m.NodeName, err)
	}
	return nil
}

func nodeIDs(n *corev1.Node) (map[string]string, error) {
	ids := map[string]string{}
	if raw := n.Annotations[NodeIDAnnotation]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &ids); err != nil {
			return nil, fmt.Errorf("node %s annotation %s is not a JSON map: %w", n.Name, NodeIDAnnotation, err)
		}
	}
	return ids, nil
}

func setNodeIDs(n *corev1.Node, ids map[string]string) {
	if len(ids) == 0 {
		delete(n.Annotations, NodeIDAnnotation)
		return
	}
	raw, _ := json.Marshal(ids) // map[string]string always marshals; keys come out sorted
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[NodeIDAnnotation] = string(raw)
}

// metaPatch is the JSON merge patch from a's labels and annotations to b's, with a's
// resourceVersion so that a change made since a was read is a conflict.
func metaPatch(a, b *corev1.Node) ([]byte, error) {
	diff := func(old, cur map[string]string) map[string]*string {
		d := map[string]*string{}
		for k, v := range cur {
			if ov, ok := old[k]; !ok || ov != v {
				d[k] = ptr(v)
			}
		}
		for k := range old {
			if _, ok := cur[k]; !ok {
				d[k] = nil
			}
		}
		return d
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": a.ResourceVersion,
		"labels":          diff(a.Labels, b.Labels),
		"annotations":     diff(a.Annotations, b.Annotations),
	}})
}

func equalMeta(a, b *corev1.Node) bool {
	return maps.Equal(a.Annotations, b.Annotations) && maps.Equal(a.Labels, b.Labels)
}

func ptr[T any](v T) *T { return &v }
