package groupcontroller

import (
	"context"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter/opmetrics"
)

// subject is vgs as upstream's group operation metrics label it: the driver of its content,
// else of its class.
func (c *Controller) subject(vgs *groupv1.VolumeGroupSnapshot, content *groupv1.VolumeGroupSnapshotContent) opmetrics.Subject {
	s := opmetrics.Subject{Ops: opmetrics.Group, Type: opmetrics.Dynamic}
	if vgs.Spec.Source.VolumeGroupSnapshotContentName != nil {
		s.Type = opmetrics.PreProvisioned
	}
	if content != nil {
		s.Driver = content.Spec.Driver
	} else if name := ptr.Deref(vgs.Spec.VolumeGroupSnapshotClassName, ""); name != "" {
		if class, err := c.classes.Get(name); err == nil {
			s.Driver = class.Driver
		}
	}
	return s
}

// updateInFlight recomputes the groups' share of the in-flight gauge (every 30 s, as the
// snapshots'): groups not yet ready, and groups being deleted.
func (c *Controller) updateInFlight(context.Context) {
	all, err := c.groups.List(labels.Everything())
	if err != nil {
		return
	}
	n := 0
	for _, g := range all {
		if g.DeletionTimestamp != nil || g.Status == nil || !ptr.Deref(g.Status.ReadyToUse, false) {
			n++
		}
	}
	c.cfg.Metrics.SetInFlight("groups", n)
}
