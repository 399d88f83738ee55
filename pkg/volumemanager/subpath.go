package volumemanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/pkg/volume/payload"
	"github.com/kubevol/kubevol/pkg/volume/removeall"
	"github.com/kubevol/kubevol/pkg/volume/subpath"
)

// cleanSubpaths unmounts and removes the subPath bind mounts of a pod's volume ("" for all
// volumes) under <pod>/volume-subpaths, before the volume is torn down (upstream:
// CleanSubPaths). Only mount points below that directory are touched.
func (m *Manager) cleanSubpaths(uid types.UID, specName string) error {
	dir := m.cfg.Paths.PodSubpathsDir(uid)
	if specName != "" {
		dir = filepath.Join(dir, specName)
	}
	if _, err := os.Lstat(dir); err != nil {
		return nil
	}
	mps, err := m.mountsBelow(dir)
	if err != nil {
		return err
	}
	for i := len(mps) - 1; i >= 0; i-- { // deepest, i.e. latest, first
		if err := m.mounter.Unmount(mps[i]); err != nil {
			return err
		}
	}
	return removeall.All(dir)
}

// mountsBelow lists the mount points under dir, in mount table order.
func (m *Manager) mountsBelow(dir string) ([]string, error) {
	mps, err := m.mounter.List()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mp := range mps {
		if strings.HasPrefix(mp.Path, dir+"/") {
			out = append(out, mp.Path)
		}
	}
	return out, nil
}

// subpathRetry is how soon a pod whose subPath could not be prepared is tried again.
const subpathRetry = 5 * time.Second

// ensureSubpaths bind-mounts every subPath and subPathExpr of the pod's containers at
// <pod>/volume-subpaths/<volume>/<container>/<index>, as the kubelet does before a
// container starts, once all the pod's volumes are mounted. A subPath that is, or becomes,
// a symlink out of its volume is refused (CVE-2017-1002101, CVE-2021-25741). Like
// upstream, a subPath mount binds what the path was at that moment: later ConfigMap
// updates do not reach it.
func (m *Manager) ensureSubpaths(ctx context.Context, pod *v1.Pod, volumes []DesiredVolume) time.Duration {
	uid := pod.UID
	var done bool
	m.records.with(uid, func(r *podRecord) { done = r.subpathsDone })
	if done || !hasSubpaths(pod) {
		return 0
	}
	type vol struct{ path, inner string }
	byOuter := map[string]vol{}
	for _, dv := range volumes {
		plugin, err := m.plugins.FindByName(dv.PluginName)
		if err != nil {
			continue
		}
		mounter, err := plugin.NewMounter(dv.Spec, pod)
		if err != nil {
			continue
		}
		if mounter.Path() == "" {
			// No directory on the node (an image volume): the runtime applies the
			// subPath, as upstream's kubelet leaves an image volume's subPath to it.
			continue
		}
		for _, outer := range dv.OuterNames {
			byOuter[outer] = vol{mounter.Path(), dv.Spec.Name()}
		}
	}
	fail := func(msg string) time.Duration {
		var prev string
		m.records.with(uid, func(r *podRecord) { prev, r.subpathErr = r.subpathErr, msg })
		if msg != prev {
			m.recorder.Event(pod, v1.EventTypeWarning, "FailedMount", msg)
			klog.FromContext(ctx).Error(nil, "SubPath refused", "pod", klog.KObj(pod), "reason", msg)
		}
		return subpathRetry
	}
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		env := containerEnv(pod, &c)
		for i, vm := range c.VolumeMounts {
			sp := vm.SubPath
			if vm.SubPathExpr != "" {
				sp = expand(vm.SubPathExpr, env)
			}
			if sp == "" {
				continue
			}
			v, ok := byOuter[vm.Name]
			if !ok {
				continue
			}
			target := m.cfg.Paths.PodSubpathDir(uid, v.inner, c.Name, i)
			if err := subpath.Prepare(m.mounter, v.path, sp, target, vm.ReadOnly); err != nil {
				return fail(fmt.Sprintf("failed to prepare subPath %q for volumeMount %q of container %q: %v", sp, vm.Name, c.Name, err))
			}
		}
	}
	m.records.with(uid, func(r *podRecord) { r.subpathsDone, r.subpathErr = true, "" })
	return 0
}

func hasSubpaths(pod *v1.Pod) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, vm := range c.VolumeMounts {
				if vm.SubPath != "" || vm.SubPathExpr != "" {
					return true
				}
			}
		}
	}
	return false
}

// containerEnv is what subPathExpr may refer to: env values and downward API fields.
func containerEnv(pod *v1.Pod, c *v1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			if v, err := payload.FieldValue(pod, e.ValueFrom.FieldRef.FieldPath); err == nil {
				env[e.Name] = v
			}
		}
	}
	return env
}

// expand replaces $(NAME) with env[NAME]; unknown references stay as written and $$
// escapes a dollar, as the kubelet's expansion does.
func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := env[name]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(s[i : i+3+end])
				}
				i += 2 + end
				continue
			}
			b.WriteByte('$')
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
