// Package crds holds the snapshot.storage.k8s.io CustomResourceDefinitions (VolumeSnapshot,
// VolumeSnapshotContent, VolumeSnapshotClass) and the groupsnapshot.storage.k8s.io ones
// (VolumeGroupSnapshot, VolumeGroupSnapshotContent, VolumeGroupSnapshotClass) that `kubevol
// up` installs. The YAML is
// generated from the upstream API types by hack/crdgen (controller-tools plus upstream's
// post-generation edits) and embedded here; TestGeneratedCRDsAreCurrent regenerates it.
package crds

//go:generate go -C ../../../../hack/crdgen run . -root ../.. -out ../../internal/component/snapshotter/crds

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var files embed.FS

// Files returns the CRD files by name, as generated.
func Files() (map[string][]byte, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out[n] = b
	}
	return out, nil
}

// CRDs returns the six CRDs, sorted by name.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	fs, err := Files()
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for name, b := range fs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, crd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ConvertedCRD is the CRD whose versions differ in schema: its objects are converted by
// the snapshot-conversion-webhook (upstream patches this one CRD only).
const ConvertedCRD = "volumegroupsnapshotcontents.groupsnapshot.storage.k8s.io"

// Webhook is where the API server has the snapshot-conversion-webhook convert ConvertedCRD's
// objects: the HTTPS URL of its /convert and the PEM bundle of the CAs that verify it.
type Webhook struct {
	URL      string
	CABundle []byte
}

// Install creates the CRDs, or updates them to this version, and waits until the API
// server serves them (Established). The CRDs convert between versions by apiVersion alone,
// as upstream ships them.
func Install(ctx context.Context, client apiextensionsclient.Interface) error {
	return InstallWith(ctx, client, nil)
}

// InstallWith is Install with ConvertedCRD's spec.conversion set to wh (None when nil).
func InstallWith(ctx context.Context, client apiextensionsclient.Interface, wh *Webhook) error {
	all, err := CRDs()
	if err != nil {
		return err
	}
	api := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range all {
		if crd.Name == ConvertedCRD && wh != nil {
			url := wh.URL
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: wh.CABundle},
					ConversionReviewVersions: []string{"v1"},
				},
			}
		}
		cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, crd, metav1.CreateOptions{})
		case err == nil:
			crd.ResourceVersion = cur.ResourceVersion
			_, err = api.Update(ctx, crd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range all {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range cur.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", crd.Name, err)
		}
	}
	return nil
}
