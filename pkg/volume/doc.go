// Package volume is kubevol's volume plugin framework, modelled on the kubelet's
// pkg/volume: plugins register with a PluginManager by name and claim specs through
// CanSupport; a Host gives them directories, the Kubernetes client, object getters, the
// mounter and wrapper mounters; Mounters set a volume up for one pod and Unmounters tear it
// down. Device-mountable and attachable plugins (CSI with stage/attach), block plugins (raw
// block volumes in volumeDevices) and expandable plugins (NodeExpandVolume) extend Plugin.
//
// The on-disk layout is the kubelet's (see Paths), so tools and CSI drivers that expect
// kubelet paths work with a root directory of /var/lib/kubelet.
package volume
