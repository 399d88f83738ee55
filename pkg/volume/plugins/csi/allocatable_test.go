package csi

import (
	"context"
	"sync/atomic"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevol/kubevol/pkg/volume"
)

// refreshingDrivers counts the allocatable refreshes asked for.
type refreshingDrivers struct {
	Drivers
	refreshed atomic.Int32
}

func (d *refreshingDrivers) RefreshAllocatable(context.Context, string) error {
	d.refreshed.Add(1)
	return nil
}

var _ AllocatableRefresher = (*refreshingDrivers)(nil)

// An attach that failed with ResourceExhausted is the node's attachment limit when the
// CSIDriver makes the allocatable count mutable: the count is read again and the error says
// so (the pod is rejected); without the period, or with another code, it is an ordinary
// attach error.
func TestAttachResourceExhausted(t *testing.T) {
	name := AttachmentName("vol-1", "d.example.com", "n1")
	exhausted, internal := int32(8), int32(13)
	for _, tc := range []struct {
		name          string
		period        *int64
		code          *int32
		limit, refrsh bool
	}{
		{"ResourceExhausted with a period", ptrTo(int64(60)), &exhausted, true, true},
		{"ResourceExhausted without a period", nil, &exhausted, false, false},
		{"another code", ptrTo(int64(60)), &internal, false, false},
		{"no code", ptrTo(int64(60)), nil, false, false},
	} {
		va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: storagev1.VolumeAttachmentStatus{
			AttachError: &storagev1.VolumeError{Message: "too many volumes", ErrorCode: tc.code}}}
		drv := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d.example.com"}, Spec: storagev1.CSIDriverSpec{NodeAllocatableUpdatePeriodSeconds: tc.period}}
		f := newFixture(t, []runtime.Object{va, drv}...)
		rd := &refreshingDrivers{Drivers: f.plugin.drivers}
		f.plugin.drivers = rd
		a, _ := f.plugin.NewAttacher()
		_, err := a.WaitForAttach(context.Background(), pvSpec(), "", testPod())
		if err == nil || volume.IsAttachLimitExceeded(err) != tc.limit || (rd.refreshed.Load() > 0) != tc.refrsh {
			t.Errorf("%s: error %v (limit %v), refreshed %d; want limit %v, refresh %v", tc.name, err,
				volume.IsAttachLimitExceeded(err), rd.refreshed.Load(), tc.limit, tc.refrsh)
		}
	}
}
