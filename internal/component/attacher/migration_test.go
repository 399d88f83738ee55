package attacher

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// An in-tree PV of the plugin migrated to the driver, and an inline volume spec (translated
// by the attach/detach controller, or still in-tree), are attached as their CSI translation,
// as external-attacher does; the PV object itself stays the one the finalizer goes on. Other
// plugins' and drivers' volumes are refused.
func TestSourceOfMigratedVolumes(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ebs := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "ebs"}, Spec: corev1.PersistentVolumeSpec{
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-1", FSType: "xfs"}}}}
	pd := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pd"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "d"}}}}
	for _, pv := range []*corev1.PersistentVolume{ebs, pd} {
		if err := idx.Add(pv); err != nil {
			t.Fatal(err)
		}
	}
	c := &Controller{cfg: Config{}, pvLister: corelisters.NewPersistentVolumeLister(idx)}
	c.cfg.DriverName = "ebs.csi.aws.com"
	va := func(src storagev1.VolumeAttachmentSource) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{Spec: storagev1.VolumeAttachmentSpec{Attacher: c.cfg.DriverName, NodeName: "n", Source: src}}
	}
	name := func(n string) storagev1.VolumeAttachmentSource {
		return storagev1.VolumeAttachmentSource{PersistentVolumeName: &n}
	}

	src, err := c.source(va(name("ebs")))
	if err != nil || src.pv != ebs || src.csi.Driver != "ebs.csi.aws.com" || src.csi.VolumeHandle != "vol-1" || src.csi.FSType != "xfs" {
		t.Fatalf("in-tree EBS PV: %+v, %v", src, err)
	}
	if ebs.Spec.CSI != nil {
		t.Error("the PV in the cache was modified")
	}
	if _, err := c.source(va(name("pd"))); err == nil || !strings.Contains(err.Error(), "not a CSI volume of driver ebs.csi.aws.com") {
		t.Errorf("GCE PD PV on the EBS driver: %v", err)
	}

	inTree := &corev1.PersistentVolumeSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-2"}}}
	translated := &corev1.PersistentVolumeSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-3"}}}
	for spec, handle := range map[*corev1.PersistentVolumeSpec]string{inTree: "vol-2", translated: "vol-3"} {
		src, err := c.source(va(storagev1.VolumeAttachmentSource{InlineVolumeSpec: spec}))
		if err != nil || src.pv != nil || src.csi.VolumeHandle != handle || len(src.modes) != 1 {
			t.Errorf("inline spec of %s: %+v, %v", handle, src, err)
		}
	}
	cinder := &corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Cinder: &corev1.CinderPersistentVolumeSource{VolumeID: "v"}}}
	if _, err := c.source(va(storagev1.VolumeAttachmentSource{InlineVolumeSpec: cinder})); err == nil || !strings.Contains(err.Error(), "cinder.csi.openstack.org") {
		t.Errorf("inline Cinder spec on the EBS driver: %v", err)
	}
}
