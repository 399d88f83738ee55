// Package crds holds the snapshot.storage.k8s.io CustomResourceDefinitions (VolumeSnapshot,
// VolumeSnapshotContent, VolumeSnapshotClass) and the groupsnapshot.storage.k8s.io ones
// (VolumeGroupSnapshot, VolumeGroupSnapshotContent, VolumeGroupSnapshotClass) that `kubevol
// up` installs. The YAML is
// generated from the upstream API types by hack/crdgen (controller-tools plus upstream's
// post-generation edits) and embedded here; TestGeneratedCRDsAreCurrent regenerates it.
package crds

//go:generate go -C ../../../hack/crdgen run . -root ../.. -out ../../internal/snapshot/crds

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

// Install creates the CRDs, or updates them to this version, and waits until the API
// server serves them (Established).
func Install(ctx context.Context, client apiextensionsclient.Interface) error {
	all, err := CRDs()
	if err != nil {
		return err
	}
	api := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range all {
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
