package intent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The instances of a --node-deployment provisioner share the driver's finalizer: each must
// see only its own records, or one node's restart would clean up (and forget) another
// node's CreateVolume while it may still be running.
func TestRecordsAreTheirNodes(t *testing.T) {
	ctx := context.Background()
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "uid-1"}}
	cs := fake.NewClientset(claim)
	nodeA := New(cs, "local.kubevol.io", "node-a")
	stored, err := nodeA.Add(ctx, claim, Record{PVName: "pvc-uid-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		j    *Journal
		want bool
	}{
		{"the writing node", New(cs, "local.kubevol.io", "node-a"), true},
		{"another node", New(cs, "local.kubevol.io", "node-b"), false},
		{"a central provisioner", New(cs, "local.kubevol.io", ""), false},
		{"another driver", New(cs, "other.example.com", "node-a"), false},
	} {
		if _, ok := c.j.Parse(stored); ok != c.want {
			t.Errorf("%s: Parse = %v, want %v", c.name, ok, c.want)
		}
		recs, err := c.j.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(recs) == 1; got != c.want {
			t.Errorf("%s: Load found %d records, want ours=%v", c.name, len(recs), c.want)
		}
	}

	// A record that cannot be read, with the shared finalizer: a central provisioner takes it
	// (it is the driver's only instance); a node's instance cannot tell whose it is.
	broken := stored.DeepCopy()
	broken.Annotations[Annotation] = "{"
	if _, ok := New(cs, "local.kubevol.io", "").Parse(broken); !ok {
		t.Error("central provisioner: an unreadable record with our finalizer is not ours")
	}
	if _, ok := New(cs, "local.kubevol.io", "node-a").Parse(broken); ok {
		t.Error("node instance: an unreadable record with the shared finalizer was taken as ours")
	}
}
