package volumemanager

import (
	"context"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestFetchClusterTrustBundle(t *testing.T) {
	bundle := func(name, signer, pem string, labels map[string]string) *certificatesv1.ClusterTrustBundle {
		return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: pem}}
	}
	c := fake.NewClientset(
		bundle("a", "example.com/s", "PEM-A", map[string]string{"env": "prod"}),
		bundle("b", "example.com/s", "PEM-B", map[string]string{"env": "dev"}),
		bundle("c", "other.com/s", "PEM-C", nil),
	)
	ctx := context.Background()
	name, signer := "c", "example.com/s"
	if got, err := fetchClusterTrustBundle(ctx, c, v1.ClusterTrustBundleProjection{Name: &name}); err != nil || got != "PEM-C" {
		t.Errorf("by name: %q %v", got, err)
	}
	if got, err := fetchClusterTrustBundle(ctx, c, v1.ClusterTrustBundleProjection{SignerName: &signer}); err != nil || got != "PEM-A\nPEM-B\n" {
		t.Errorf("by signer: %q %v", got, err)
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	if got, err := fetchClusterTrustBundle(ctx, c, v1.ClusterTrustBundleProjection{SignerName: &signer, LabelSelector: sel}); err != nil || got != "PEM-A\n" {
		t.Errorf("by signer and selector: %q %v", got, err)
	}
	none := "nobody.com/s"
	if _, err := fetchClusterTrustBundle(ctx, c, v1.ClusterTrustBundleProjection{SignerName: &none}); !isNotFound(err) {
		t.Errorf("no bundle: %v, want NotFound", err)
	}
}
