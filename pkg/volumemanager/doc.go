// Package volumemanager is the kubelet's volume manager as a library: it keeps the volumes
// of the pods bound to one node set up, and tears down what is no longer wanted.
//
// The parts, as upstream (pkg/kubelet/volumemanager):
//
//   - DesiredState: which pod wants which volume, filled by the populator from the pods
//     bound to the node (PVC → PV resolved by GET through the ObjectSource).
//   - ActualState: what is attached, device-mounted and mounted per pod, including the
//     uncertain states after a timeout or a restart.
//   - the reconciler, which unmounts first (so a volume can move from a deleted pod to a
//     new one), then attaches and mounts, then unmounts devices no pod uses;
//   - the operation executor (internal/executor), which runs at most one operation per
//     volume (per volume and pod for plugins without a device mount) with exponential
//     backoff from 500 ms to about 2 min;
//   - reconstruction, which rebuilds the actual state from the pods directory (volumes/
//     and the block volumes' volumeDevices/) and /proc/self/mountinfo after a restart;
//   - node expansion: when a claim's PV has grown and the resizer left the expansion to
//     the node, NodeExpand on the mounted volume and the claim's status updated.
//
// Block volumes (a PVC with volumeMode Block used in volumeDevices) go through the same
// states, with the plugin's block mapper in place of its mounter.
//
// The manager reads the API through two injectable sources (Config.Objects, Config.Pods)
// whose defaults read exactly what a kubelet reads, within what the Node authorizer grants a
// node: its pods by a spec.nodeName watch, each referenced ConfigMap and Secret by a watch of
// that one object, claims, volumes, VolumeAttachments and CSI secrets by GET. Pod events and
// object changes enqueue exactly the pods they affect into rate-limited work queues, finished
// operations enqueue their pod again, and a slow periodic resync is the safety net. So a
// ConfigMap update reaches the files of every pod that mounts it in well under a second.
//
// Use New with a Config, then Run. Observer callbacks report when a pod's volumes are all
// mounted, when they fail, and when a pod's volumes are all torn down. DesiredState and
// ActualState are read-only views for embedders (what a pod wants, what is mounted where);
// only the manager changes the states.
package volumemanager
