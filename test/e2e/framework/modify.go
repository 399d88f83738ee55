package framework

import (
	"context"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// AttributesClass creates the VolumeAttributesClass name of driverName; the test's cleanup
// deletes it.
func AttributesClass(ctx context.Context, t testing.TB, cs kubernetes.Interface, name, driverName string, params map[string]string) string {
	t.Helper()
	_, err := cs.StorageV1().VolumeAttributesClasses().Create(ctx, &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, DriverName: driverName, Parameters: params,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().VolumeAttributesClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// PatchClaimClass sets the claim's class the way `kubectl patch pvc` does (see
// kubecheck.PatchClaimClass), failing the test if the apiserver refuses it.
func PatchClaimClass(ctx context.Context, t testing.TB, cs kubernetes.Interface, ns, claim, class string) {
	t.Helper()
	if err := kubecheck.PatchClaimClass(ctx, cs, ns, claim, class); err != nil {
		t.Fatalf("kubectl patch pvc %s: %v", claim, err)
	}
}

// Get returns the page at url (a component's metrics or health endpoint), failing the test
// on an error or a status other than 200 OK.
func Get(t testing.TB, url string) string {
	t.Helper()
	body, err := kubecheck.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	return body
}
