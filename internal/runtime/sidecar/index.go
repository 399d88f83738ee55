package sidecar

import (
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/tools/cache"
)

// byPV names the index of VolumeAttachments by the PersistentVolume they attach.
const byPV = "pv"

// IndexAttachmentsByPV adds to a VolumeAttachment informer the index that
// AttachmentsOfPV reads: finding a PV's attachments then costs no scan of them all
// (upstream lists every VolumeAttachment each time). Call it before the informer starts.
func IndexAttachmentsByPV(inf cache.SharedIndexInformer) error {
	return inf.AddIndexers(cache.Indexers{byPV: func(obj any) ([]string, error) {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Source.PersistentVolumeName != nil {
			return []string{*va.Spec.Source.PersistentVolumeName}, nil
		}
		return nil, nil
	}})
}

// AttachmentsOfPV returns the cached VolumeAttachments of the PersistentVolume pv, from an
// indexer prepared by IndexAttachmentsByPV.
func AttachmentsOfPV(indexer cache.Indexer, pv string) ([]*storagev1.VolumeAttachment, error) {
	objs, err := indexer.ByIndex(byPV, pv)
	if err != nil {
		return nil, err
	}
	vas := make([]*storagev1.VolumeAttachment, 0, len(objs))
	for _, o := range objs {
		if va, ok := o.(*storagev1.VolumeAttachment); ok {
			vas = append(vas, va)
		}
	}
	return vas, nil
}
