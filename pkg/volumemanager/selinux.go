package volumemanager

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
)

// SELinux context mounts, as the kubelet chooses them with SELinuxMountReadWriteOncePod,
// SELinuxChangePolicy and (GA in 1.37) SELinuxMount: a persistent volume whose plugin
// supports it (CSI: CSIDriver.spec.seLinuxMount) is mounted with -o context="<label>", the
// file label of the containers that use it, unless the pod asks for
// seLinuxChangePolicy: Recursive. All containers of the pod using a volume must agree on
// the label, and so must all pods sharing the volume on the node; otherwise the pod's
// volume is refused. Nothing is chosen on a host without SELinux.

// seLinuxHostEnabled reports an SELinux host: selinuxfs mounted and enforcing or permissive.
func seLinuxHostEnabled() bool {
	_, err := os.Stat("/sys/fs/selinux/enforce")
	return err == nil
}

// seLinuxFileLabel is the file label of a container's effective SELinux options, with the
// container policy's defaults for the parts not given (system_u, object_r,
// container_file_t). Without a level there is no label: the runtime gives such a container
// a level of its own choosing, which the node cannot predict, so it relabels the volume
// itself.
func seLinuxFileLabel(o *v1.SELinuxOptions) string {
	if o == nil || o.Level == "" {
		return ""
	}
	user, role, typ := o.User, o.Role, o.Type
	if user == "" {
		user = "system_u"
	}
	if role == "" {
		role = "object_r"
	}
	if typ == "" || typ == "container_t" {
		typ = "container_file_t"
	}
	return user + ":" + role + ":" + typ + ":" + o.Level
}

// containerSELinuxOptions are, for each pod volume, the effective SELinux options of every
// container that mounts it (the container's own options replace the pod's). A container
// with no options at all, neither its own nor the pod's, does not count, as upstream's
// GetPodVolumeNames: it does not take part in the label choice.
func containerSELinuxOptions(pod *v1.Pod) map[string][]*v1.SELinuxOptions {
	var podOpts *v1.SELinuxOptions
	if sc := pod.Spec.SecurityContext; sc != nil {
		podOpts = sc.SELinuxOptions
	}
	out := map[string][]*v1.SELinuxOptions{}
	forEachContainer(pod, func(c *v1.Container) {
		opts := podOpts
		if c.SecurityContext != nil && c.SecurityContext.SELinuxOptions != nil {
			opts = c.SecurityContext.SELinuxOptions
		}
		if opts == nil {
			return
		}
		for _, vm := range c.VolumeMounts {
			out[vm.Name] = append(out[vm.Name], opts)
		}
	})
	return out
}

// seLinuxAccessMode is the access_mode label of the SELinux metrics: "inline" for a pod's
// own volume, else the broadest of the PV's modes (RWX, ROX, RWO, RWOP).
func seLinuxAccessMode(spec *volume.Spec) string {
	if spec.PersistentVolume == nil {
		return "inline"
	}
	modes := spec.PersistentVolume.Spec.AccessModes
	for _, m := range []struct {
		mode  v1.PersistentVolumeAccessMode
		label string
	}{{v1.ReadWriteMany, "RWX"}, {v1.ReadOnlyMany, "ROX"}, {v1.ReadWriteOnce, "RWO"}, {v1.ReadWriteOncePod, "RWOP"}} {
		if slices.Contains(modes, m.mode) {
			return m.label
		}
	}
	return ""
}

// seLinuxPluginName is the volume_plugin label: the plugin, and for CSI its driver.
func seLinuxPluginName(plugin string, spec *volume.Spec) string {
	if pv := spec.PersistentVolume; pv != nil && pv.Spec.CSI != nil {
		return plugin + "/" + pv.Spec.CSI.Driver
	}
	if spec.Volume != nil && spec.Volume.CSI != nil {
		return plugin + "/" + spec.Volume.CSI.Driver
	}
	return plugin
}

// seLinuxChoice is what the manager decided for one pod's volume.
type seLinuxChoice struct {
	// mount is the label passed as -o context, "" for none.
	mount string
	// original is the label the pod would mount the volume with if the volume were a PV
	// (upstream's SELinuxMountLabel): the containers' label, "" when the pod asks for
	// seLinuxChangePolicy Recursive or the plugin has no context mounts. Two pods sharing a
	// volume must agree on it, so a Recursive and a MountOption pod conflict.
	original string
	// supported: the plugin can mount the volume with a context.
	supported bool
}

// chooseSELinux decides the context mount of spec for the containers in opts. A persistent
// volume is refused when the containers disagree or the label cannot be built (with
// SELinuxMount every persistent volume qualifies); a pod's inline volume only counts a
// warning, as upstream.
func (m *Manager) chooseSELinux(plugin volume.Plugin, spec *volume.Spec, opts []*v1.SELinuxOptions, pod *v1.Pod) (seLinuxChoice, error) {
	var c seLinuxChoice
	if !m.seLinuxEnabled {
		return c, nil
	}
	if s, ok := plugin.(volume.SELinuxContextMountPlugin); ok {
		supported, err := s.SupportsSELinuxContextMount(spec)
		if err != nil {
			return c, err
		}
		c.supported = supported
	}
	labels := map[string]bool{}
	for _, o := range opts {
		labels[seLinuxFileLabel(o)] = true
	}
	mode := seLinuxAccessMode(spec)
	if len(labels) > 1 {
		list := make([]string, 0, len(labels))
		for l := range labels {
			list = append(list, l)
		}
		sort.Strings(list)
		err := fmt.Errorf("multiple SELinux labels found: %s", strings.Join(list, ","))
		return c, m.seLinuxMetrics.hardOrWarn(spec, err, m.seLinuxMetrics.podMismatchErrors.WithLabelValues(mode), m.seLinuxMetrics.podMismatchWarnings.WithLabelValues(mode))
	}
	for l := range labels {
		c.original = l
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.SELinuxChangePolicy != nil && *sc.SELinuxChangePolicy == v1.SELinuxChangePolicyRecursive {
		c.original = "" // the pod asks for the runtime's recursive relabel
	}
	if !c.supported {
		c.original = ""
	}
	c.mount = c.original
	if spec.PersistentVolume == nil {
		c.mount = ""
	}
	return c, nil
}

// seLinuxConflict checks the label of a volume pod wants against the pods that already
// want it: the kubelet's "conflicting SELinux labels of volume".
func (m *Manager) seLinuxConflict(name v1.UniqueVolumeName, pluginName string, spec *volume.Spec, uid types.UID, c seLinuxChoice) error {
	if !c.supported {
		return nil
	}
	for _, other := range m.dsw.VolumeUsers(name) {
		if other == uid {
			continue
		}
		dv, ok := m.dsw.podVolume(other, name)
		if !ok || dv.seLinuxOriginal == c.original {
			continue
		}
		err := fmt.Errorf("conflicting SELinux labels of volume %s: %q and %q", spec.Name(), dv.seLinuxOriginal, c.original)
		plugin, mode := seLinuxPluginName(pluginName, spec), seLinuxAccessMode(spec)
		return m.seLinuxMetrics.hardOrWarn(spec, err, m.seLinuxMetrics.volumeMismatchErrors.WithLabelValues(plugin, mode),
			m.seLinuxMetrics.volumeMismatchWarnings.WithLabelValues(plugin, mode))
	}
	return nil
}

// seLinuxMetrics are upstream's volume_manager_selinux_* counters (gauges there, counting
// every refusal, including each retry of the same pod).
type seLinuxMetrics struct {
	containerErrors, containerWarnings           *prometheus.GaugeVec
	podMismatchErrors, podMismatchWarnings       *prometheus.GaugeVec
	volumeMismatchErrors, volumeMismatchWarnings *prometheus.GaugeVec
	admitted                                     *prometheus.GaugeVec
}

func newSELinuxMetrics(reg prometheus.Registerer) *seLinuxMetrics {
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "volume_manager_selinux_" + name, Help: help}, labels)
	}
	m := &seLinuxMetrics{
		containerErrors:        g("container_errors_total", "Number of errors when the node cannot compute the SELinux context of a container.", "access_mode"),
		containerWarnings:      g("container_warnings_total", "Number of ignored errors when the node cannot compute the SELinux context of a container.", "access_mode"),
		podMismatchErrors:      g("pod_context_mismatch_errors_total", "Number of errors when a Pod defines different SELinux contexts for its containers that use the same volume.", "access_mode"),
		podMismatchWarnings:    g("pod_context_mismatch_warnings_total", "Number of ignored errors when a Pod defines different SELinux contexts for its containers that use the same volume.", "access_mode"),
		volumeMismatchErrors:   g("volume_context_mismatch_errors_total", "Number of errors when a Pod uses a volume that is already mounted with a different SELinux context than the Pod needs.", "volume_plugin", "access_mode"),
		volumeMismatchWarnings: g("volume_context_mismatch_warnings_total", "Number of ignored errors when a Pod uses a volume that is already mounted with a different SELinux context than the Pod needs.", "volume_plugin", "access_mode"),
		admitted:               g("volumes_admitted_total", "Number of volumes whose SELinux context was fine and will be mounted with mount -o context option.", "volume_plugin", "access_mode"),
	}
	if reg != nil {
		reg.MustRegister(m.containerErrors, m.containerWarnings, m.podMismatchErrors, m.podMismatchWarnings,
			m.volumeMismatchErrors, m.volumeMismatchWarnings, m.admitted)
	}
	return m
}

// hardOrWarn counts err and returns it for a persistent volume (every one qualifies for
// SELinux mounts with SELinuxMount); for an inline volume it only counts a warning.
func (s *seLinuxMetrics) hardOrWarn(spec *volume.Spec, err error, hard, warn prometheus.Gauge) error {
	if spec.PersistentVolume != nil {
		hard.Inc()
		return err
	}
	warn.Inc()
	return nil
}

// seLinuxMountMismatch is why a pod's volume waits: it is mounted, for pods that are going
// away, with a context other than the one the pod needs, and is mounted again with the
// pod's once it is fully unmounted (upstream's seLinuxMountMismatchError, same text).
type seLinuxMountMismatch struct{ name v1.UniqueVolumeName }

func (e seLinuxMountMismatch) Error() string {
	return fmt.Sprintf("waiting for unmount of volume %q, because it is already mounted to a different pod with a different SELinux label", e.name)
}

// checkSELinuxMount returns a seLinuxMountMismatch when the volume is mounted with a
// context other than dv's.
func (m *Manager) checkSELinuxMount(dv DesiredVolume) error {
	if c, ok := m.asw.seLinuxContext(dv.Name); ok && c != dv.SELinuxLabel {
		return seLinuxMountMismatch{dv.Name}
	}
	return nil
}

// keepsMount reports whether the pod still wants its mount of the volume: it wants the
// volume, and with the context the volume is mounted with. A pod whose context changed
// (its CSIDriver's seLinuxMount, its seLinuxChangePolicy) has the volume unmounted and
// mounted again with the new one (upstream: the desired state's PodExistsInVolume compares
// the context).
func (m *Manager) keepsMount(uid types.UID, name v1.UniqueVolumeName) bool {
	dv, ok := m.dsw.podVolume(uid, name)
	if !ok {
		// A pod whose volumes are not all resolved may want this one: after a restart,
		// a claim that cannot be read yet is no reason to unmount what the pod runs on.
		return len(m.dsw.PodErrors(uid)) > 0
	}
	c, ok := m.asw.seLinuxContext(name)
	return !ok || c == dv.SELinuxLabel
}

// volumeWantedAsMounted reports whether a pod wants the volume with the context it is
// mounted with. One that only pods with another context want is unmounted, device
// included, when its last pod is gone, and not kept for them.
func (m *Manager) volumeWantedAsMounted(name v1.UniqueVolumeName) bool {
	if c, ok := m.asw.seLinuxContext(name); ok {
		return m.dsw.volumeWantedWith(name, c)
	}
	return m.dsw.VolumeWanted(name)
}
