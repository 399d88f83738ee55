// Package sanity runs the CSI conformance suite, csi-sanity (csi-test v5 pkg/sanity), against
// the kubevol driver in several configurations: both backends, with and without
// --attach-required, raw block access, and a controller and a node split across two
// processes. It has tests only.
package sanity
