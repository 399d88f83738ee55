// Package deploy makes the RBAC that deploy/ ships available to the kubevol binary and its
// tests: `kubevol up` and the e2e framework bind each component to exactly these rules.
// The manifests themselves (and their kustomizations) stay plain files for kubectl and
// kustomize.
package deploy

import "embed"

// RBAC holds <folder>/rbac.yaml of every component folder.
//
//go:embed */rbac.yaml
var RBAC embed.FS
