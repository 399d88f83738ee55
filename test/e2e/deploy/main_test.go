// Package deploy tests deploy/ as kustomize bases: each renders (sigs.k8s.io/kustomize/api's
// krusty, what `kubectl apply -k` runs), overlays set the namespace, images and driver name,
// the swap component swaps images by container name, and the rendered stack is applied for
// real to the local apiserver.
package deploy

import (
	"testing"

	"github.com/kubevol/kubevol/test/e2e/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
