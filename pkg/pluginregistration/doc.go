// Package pluginregistration speaks the kubelet plugin registration API v1
// (k8s.io/kubelet/pkg/apis/pluginregistration/v1) on both sides:
//
//   - Watcher is the node side, what the kubelet's plugin manager does: it watches the
//     registry directory (<root-dir>/plugins_registry), asks each socket there for its
//     info, hands CSI plugins to a Handler and reports the outcome back to the plugin.
//     pkg/csidrivers is the Handler a node needs for CSI.
//   - Registrar is the driver side, what node-driver-registrar does: it serves
//     <dir>/<driver>-reg.sock and tells the node the driver's CSI endpoint.
//
// Either side interoperates with its upstream counterpart: a Watcher registers drivers
// that run node-driver-registrar, and a Registrar registers a driver with a real kubelet.
// Only plugins of type CSIPlugin supporting a 1.x CSI version are accepted, as the kubelet.
package pluginregistration
