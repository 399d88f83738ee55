package intent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A record on the claim, in the form of earlier releases, is read only by the instance
// that wrote it, and goes from the claim with its finalizer.
func TestLegacyRecord(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "uid-1",
		Finalizers:  []string{"kubernetes.io/pvc-protection", LegacyFinalizer(testDriver)},
		Annotations: map[string]string{LegacyAnnotation: `{"driver":"` + testDriver + `","node":"node-a","pv":"pvc-uid-1","request":"AQI="}`}}}
	cs := fake.NewClientset(pvc)
	for _, c := range []struct {
		node string
		want bool
	}{{"node-a", true}, {"node-b", false}, {"", false}} {
		r, ok := New(cs, testNS, testDriver, c.node).Legacy(pvc)
		if ok != c.want || ok && (r.PVName != "pvc-uid-1" || string(r.Request) != "\x01\x02" || r.ClaimUID != "uid-1") {
			t.Errorf("node %q: Legacy = %+v, %v; want ours=%v", c.node, r, ok, c.want)
		}
	}
	broken := pvc.DeepCopy()
	broken.Annotations[LegacyAnnotation] = "{"
	if _, ok := New(cs, testNS, testDriver, "").Legacy(broken); !ok {
		t.Error("central provisioner: an unreadable record with our finalizer is not ours")
	}
	if _, ok := New(cs, testNS, testDriver, "node-a").Legacy(broken); ok {
		t.Error("node instance: an unreadable record with the shared finalizer was taken as ours")
	}
	if err := New(cs, testNS, testDriver, "node-a").ReleaseLegacy(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[LegacyAnnotation]; ok || len(got.Finalizers) != 1 {
		t.Errorf("after ReleaseLegacy: annotations %v, finalizers %v", got.Annotations, got.Finalizers)
	}
}
