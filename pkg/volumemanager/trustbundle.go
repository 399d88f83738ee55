package volumemanager

import (
	"context"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// fetchClusterTrustBundle reads a ClusterTrustBundle projection from certificates.k8s.io
// v1, falling back to v1beta1; if neither is served, the error is NotFound, so an optional
// source is skipped.
func fetchClusterTrustBundle(ctx context.Context, c kubernetes.Interface, src v1.ClusterTrustBundleProjection) (string, error) {
	type bundle struct{ name, signer, pem string }
	var list []bundle
	var err error
	if src.Name != nil {
		var b bundle
		if ctb, e := c.CertificatesV1().ClusterTrustBundles().Get(ctx, *src.Name, metav1.GetOptions{}); e == nil {
			b = bundle{ctb.Name, ctb.Spec.SignerName, ctb.Spec.TrustBundle}
		} else if ctb, e2 := c.CertificatesV1beta1().ClusterTrustBundles().Get(ctx, *src.Name, metav1.GetOptions{}); e2 == nil {
			b = bundle{ctb.Name, ctb.Spec.SignerName, ctb.Spec.TrustBundle}
		} else {
			return "", e
		}
		return b.pem, nil
	}
	if src.SignerName == nil {
		return "", fmt.Errorf("clusterTrustBundle needs name or signerName")
	}
	selector := ""
	if src.LabelSelector != nil {
		s, serr := metav1.LabelSelectorAsSelector(src.LabelSelector)
		if serr != nil {
			return "", serr
		}
		selector = s.String()
	}
	opts := metav1.ListOptions{LabelSelector: selector}
	if l, e := c.CertificatesV1().ClusterTrustBundles().List(ctx, opts); e == nil {
		for _, b := range l.Items {
			list = append(list, bundle{b.Name, b.Spec.SignerName, b.Spec.TrustBundle})
		}
	} else if l, e2 := c.CertificatesV1beta1().ClusterTrustBundles().List(ctx, opts); e2 == nil {
		for _, b := range l.Items {
			list = append(list, bundle{b.Name, b.Spec.SignerName, b.Spec.TrustBundle})
		}
	} else {
		err = e
	}
	if err != nil {
		return "", err
	}
	var pems []string
	for _, b := range list {
		if b.signer == *src.SignerName {
			pems = append(pems, strings.TrimSpace(b.pem))
		}
	}
	if len(pems) == 0 {
		return "", apierrors.NewNotFound(schema.GroupResource{Group: "certificates.k8s.io", Resource: "clustertrustbundles"}, *src.SignerName)
	}
	sort.Strings(pems)
	return strings.Join(pems, "\n") + "\n", nil
}
