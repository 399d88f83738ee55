package snapshotter

import (
	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	"github.com/kubevol/kubevol/internal/runtime/controller/write"
)

// The snapshot kinds' writers live here, not in package write, so that the node's
// libraries, which use that package, do not depend on the snapshot client.

// VolumeSnapshots is a Writer of VolumeSnapshots with verb, on their status too.
func VolumeSnapshots(cs snapclient.Interface, verb write.Verb) write.Writer[*snapv1.VolumeSnapshot] {
	return write.Writer[*snapv1.VolumeSnapshot]{
		Client: func(ns string) write.Client[*snapv1.VolumeSnapshot] {
			return cs.SnapshotV1().VolumeSnapshots(ns)
		},
		Resource: "volumesnapshots", Verb: verb, StatusVerb: verb,
	}
}

// VolumeGroupSnapshots is a Writer of VolumeGroupSnapshots with verb, on their status too.
func VolumeGroupSnapshots(cs snapclient.Interface, verb write.Verb) write.Writer[*groupv1.VolumeGroupSnapshot] {
	return write.Writer[*groupv1.VolumeGroupSnapshot]{
		Client: func(ns string) write.Client[*groupv1.VolumeGroupSnapshot] {
			return cs.GroupsnapshotV1().VolumeGroupSnapshots(ns)
		},
		Resource: "volumegroupsnapshots", Verb: verb, StatusVerb: verb,
	}
}

// VolumeSnapshotContents is a Writer of VolumeSnapshotContents with verb, on their status too.
func VolumeSnapshotContents(cs snapclient.Interface, verb write.Verb) write.Writer[*snapv1.VolumeSnapshotContent] {
	return write.Writer[*snapv1.VolumeSnapshotContent]{
		Client: func(string) write.Client[*snapv1.VolumeSnapshotContent] {
			return cs.SnapshotV1().VolumeSnapshotContents()
		},
		Resource: "volumesnapshotcontents", Verb: verb, StatusVerb: verb,
	}
}

// VolumeGroupSnapshotContents is a Writer of VolumeGroupSnapshotContents with verb, on their
// status too.
func VolumeGroupSnapshotContents(cs snapclient.Interface, verb write.Verb) write.Writer[*groupv1.VolumeGroupSnapshotContent] {
	return write.Writer[*groupv1.VolumeGroupSnapshotContent]{
		Client: func(string) write.Client[*groupv1.VolumeGroupSnapshotContent] {
			return cs.GroupsnapshotV1().VolumeGroupSnapshotContents()
		},
		Resource: "volumegroupsnapshotcontents", Verb: verb, StatusVerb: verb,
	}
}
