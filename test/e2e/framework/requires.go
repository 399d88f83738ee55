package framework

import (
	"testing"

	"github.com/kubevol/kubevol/internal/runtime/apicheck"
)

// Requires skips the test, saying why, when the cluster's Kubernetes release does not serve
// r: the compatibility matrix (`make matrix`) runs the packages on older releases, which
// lack the APIs that went GA later. why names the feature and the release that serves it.
// On the pinned release every API is served, so nothing is skipped there.
func Requires(t testing.TB, r apicheck.Resource, why string) {
	t.Helper()
	ok, server, err := apicheck.Served(Client(t).Discovery(), r)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skipf("Kubernetes %s does not serve %s: %s", server, r, why)
	}
}
