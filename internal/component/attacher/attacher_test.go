package attacher

import (
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFinalizerMatchesUpstream(t *testing.T) {
	for driver, want := range map[string]string{
		"local.kubevol.io":       "external-attacher/local-kubevol-io",
		"hostpath.csi.k8s.io":    "external-attacher/hostpath-csi-k8s-io",
		"example.com/odd_name.-": "external-attacher/example-com-odd-name--X",
	} {
		if got := Finalizer(driver); got != want {
			t.Errorf("Finalizer(%q) = %q, want %q", driver, got, want)
		}
	}
}

// Recording an attach error must not trigger an immediate retry that bypasses the backoff;
// any other change, and every periodic resync, must.
func TestOnlyErrorsChanged(t *testing.T) {
	base := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va", ResourceVersion: "1"}}
	withErr := base.DeepCopy()
	withErr.ResourceVersion = "2"
	withErr.Status.AttachError = &storagev1.VolumeError{Message: "boom"}
	if !onlyErrorsChanged(base, withErr) {
		t.Error("an attachError-only update was treated as a real change")
	}
	deleted := withErr.DeepCopy()
	deleted.ResourceVersion = "3"
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	if onlyErrorsChanged(withErr, deleted) {
		t.Error("a deletion was treated as an error-only change")
	}
	attached := base.DeepCopy()
	attached.ResourceVersion = "4"
	attached.Status.Attached = true
	if onlyErrorsChanged(base, attached) {
		t.Error("status.attached flipping was treated as an error-only change")
	}
}
