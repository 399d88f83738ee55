// Package deploy tests deploy/ as kustomize bases: each renders (sigs.k8s.io/kustomize/api's
// krusty, what `kubectl apply -k` runs), overlays set the namespace, images and driver name,
// the swap component swaps images by container name, every base is accepted by the local
// apiserver (strict server-side dry run), and deploy/sidecars' RBAC, applied for real,
// grants its ServiceAccount upstream's verbs.
package deploy

import (
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
