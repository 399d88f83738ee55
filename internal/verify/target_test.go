package verify

import (
	"context"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// `kubevol up --driver ... &` then `kubevol verify`: the API answers before up has
// created the driver's CSIDriver, and verify must wait for it rather than fail.
func TestWaitCSIDriverWaitsForUp(t *testing.T) {
	cs := fake.NewClientset(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "ext.example.com"}})
	gets := 0
	cs.PrependReactor("get", "csidrivers", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets == 1 {
			return true, nil, apierrors.NewNotFound(storagev1.Resource("csidrivers"), "ext.example.com")
		}
		return false, nil, nil
	})
	d, err := waitCSIDriver(context.Background(), cs, "ext.example.com", fixedWait(time.Minute))
	if err != nil {
		t.Fatalf("waitCSIDriver: %v", err)
	}
	if d.Name != "ext.example.com" || gets < 2 {
		t.Fatalf("got %v after %d gets", d.Name, gets)
	}
}

func TestWaitCSIDriverNamesTheDriversThere(t *testing.T) {
	cs := fake.NewClientset(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "ext.example.com"}})
	_, err := waitCSIDriver(context.Background(), cs, "ext.exmaple.com", fixedWait(300*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "no CSIDriver ext.exmaple.com") || !strings.Contains(err.Error(), "the cluster has: ext.example.com") {
		t.Fatalf("want an error naming the missing and the existing driver, got %v", err)
	}
}
