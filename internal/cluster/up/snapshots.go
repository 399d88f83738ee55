package up

import (
	"context"

	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/crds"
)

// DefaultSnapshotClass is the VolumeSnapshotClass `kubevol up` installs with the default
// StorageClass, as the driver's default class.
const DefaultSnapshotClass = "kubevol-local"

// DefaultGroupSnapshotClass is the driver's default VolumeGroupSnapshotClass.
const DefaultGroupSnapshotClass = "kubevol-local"

// installSnapshotObjects installs the snapshot.storage.k8s.io and groupsnapshot.storage.k8s.io
// CRDs, the group contents converted by wh, and the driver's default VolumeSnapshotClass and
// VolumeGroupSnapshotClass.
func installSnapshotObjects(ctx context.Context, cfg *rest.Config, wh *crds.Webhook) error {
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := crds.InstallWith(ctx, ext, wh); err != nil {
		return err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	snap, err := snapclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	class := &snapv1.VolumeSnapshotClass{
		ObjectMeta:     metav1.ObjectMeta{Name: DefaultSnapshotClass, Annotations: map[string]string{snapshotter.AnnDefaultClass: "true"}},
		Driver:         DriverName,
		DeletionPolicy: snapv1.VolumeSnapshotContentDelete,
	}
	_, err = snap.SnapshotV1().VolumeSnapshotClasses().Create(ctx, class, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) { // an existing one is kept as the user may have changed it
		return err
	}
	group := &groupv1.VolumeGroupSnapshotClass{
		ObjectMeta:     metav1.ObjectMeta{Name: DefaultGroupSnapshotClass, Annotations: map[string]string{snapshotter.AnnGroupDefaultClass: "true"}},
		Driver:         DriverName,
		DeletionPolicy: snapv1.VolumeSnapshotContentDelete,
	}
	_, err = snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().Create(ctx, group, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
