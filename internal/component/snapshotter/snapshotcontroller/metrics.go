package snapshotcontroller

import (
	"context"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/snapshotter/opmetrics"
)

// subject is vs as the operation metrics label it.
func subject(vs *snapv1.VolumeSnapshot, driver string) opmetrics.Subject {
	s := opmetrics.Subject{Ops: opmetrics.Snapshot, Driver: driver, Type: opmetrics.Dynamic}
	if vs.Spec.Source.VolumeSnapshotContentName != nil {
		s.Type = opmetrics.PreProvisioned
	}
	return s
}

// deletedSubject is a released vs as the metrics label it: the driver of its content, else
// of its class.
func (c *Controller) deletedSubject(vs *snapv1.VolumeSnapshot, content *snapv1.VolumeSnapshotContent) opmetrics.Subject {
	driver := ""
	if content != nil {
		driver = content.Spec.Driver
	} else if name := ptr.Deref(vs.Spec.VolumeSnapshotClassName, ""); name != "" {
		if class, err := c.classes.Get(name); err == nil {
			driver = class.Driver
		}
	}
	return subject(vs, driver)
}

// updateInFlight recomputes the snapshots' share of the in-flight gauge (every 30 s, as
// upstream): snapshots not yet ready, and snapshots being deleted.
func (c *Controller) updateInFlight(context.Context) {
	all, err := c.snapshots.List(labels.Everything())
	if err != nil {
		return
	}
	n := 0
	for _, vs := range all {
		if vs.DeletionTimestamp != nil || vs.Status == nil || !ptr.Deref(vs.Status.ReadyToUse, false) {
			n++
		}
	}
	c.cfg.Metrics.SetInFlight("snapshots", n)
}
