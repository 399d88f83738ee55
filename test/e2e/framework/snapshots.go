package framework

import (
	"context"
	"sync"
	"testing"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/rest"

	"github.com/kubevol/kubevol/internal/component/snapshotter/crds"
)

var (
	snapshotCRDs    sync.Once
	snapshotCRDsErr error
)

// InstallSnapshotCRDs installs the snapshot and group snapshot CRDs in the package's
// cluster, once per test binary.
func InstallSnapshotCRDs(ctx context.Context, t testing.TB) {
	t.Helper()
	snapshotCRDs.Do(func() {
		ext, err := apiextensionsclient.NewForConfig(RESTConfig())
		if err == nil {
			err = crds.Install(ctx, ext)
		}
		snapshotCRDsErr = err
	})
	if snapshotCRDsErr != nil {
		t.Fatalf("install snapshot CRDs: %v", snapshotCRDsErr)
	}
}

// SnapshotClient is an admin client of the snapshot API. Custom resources are served as
// JSON only.
func SnapshotClient(t testing.TB) snapclient.Interface {
	t.Helper()
	cfg := rest.CopyConfig(RESTConfig())
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	c, err := snapclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
