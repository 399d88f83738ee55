// Package examples holds the manifests `kubevol up --demo` applies: a StorageClass, a PVC,
// a ConfigMap and a Secret, and a pod that mounts them with an emptyDir and an inline
// ephemeral CSI volume. They are plain YAML, usable with kubectl apply -f examples/.
package examples

import "embed"

// Namespace is where the demo objects live.
const Namespace = "kubevol-demo"

// PodName is the demo pod.
const PodName = "demo"

// Manifests are the YAML files of this directory.
//
//go:embed *.yaml
var Manifests embed.FS

// Snapshot holds snapshot/: a VolumeSnapshot of the demo's claim, and a claim restored
// from it with a pod that mounts it (`kubevol up --demo` applies them after the first part).
//
//go:embed snapshot/*.yaml
var Snapshot embed.FS

// GroupSnapshot holds groupsnapshot/: a second claim and a VolumeGroupSnapshot of both,
// and a claim restored from the group's member of the demo's claim with a pod that mounts
// it (`kubevol up --demo` applies them last).
//
//go:embed groupsnapshot/*.yaml
var GroupSnapshot embed.FS

// Modify holds modify/: VolumeAttributesClasses of the kubevol driver, which `kubevol up
// --demo` applies to the demo's claim, in use, to make it read-only and writable again.
//
//go:embed modify/*.yaml
var Modify embed.FS
