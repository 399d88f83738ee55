// Package payload turns ConfigMaps, Secrets and the downward API into the file sets that
// the atomic writer publishes, with upstream's rules for items, modes and optional keys.
package payload

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kubevol/kubevol/pkg/volume/atomicwriter"
)

// Files is a payload: relative path to content and mode.
type Files = map[string]atomicwriter.FileProjection

// DefaultMode is the API's default for defaultMode (0644), used when the field is unset,
// e.g. in objects built without API defaulting.
const DefaultMode int32 = 0o644

// FromKeys projects data (ConfigMap data and binaryData, or Secret data) through items: no
// items means every key under its own name; with items, each listed key under its path. A
// listed key that is missing is an error unless optional. Every path is validated.
func FromKeys(data map[string][]byte, items []v1.KeyToPath, defaultMode *int32, optional bool) (Files, error) {
	mode := DefaultMode
	if defaultMode != nil {
		mode = *defaultMode
	}
	out := make(Files, len(data))
	if len(items) == 0 {
		for k, v := range data {
			if err := atomicwriter.ValidatePath(k); err != nil {
				return nil, fmt.Errorf("key %q: %w", k, err)
			}
			out[k] = atomicwriter.FileProjection{Data: v, Mode: mode}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("references non-existent key %q", it.Key)
		}
		if err := atomicwriter.ValidatePath(it.Path); err != nil {
			return nil, fmt.Errorf("item %q: %w", it.Key, err)
		}
		m := mode
		if it.Mode != nil {
			m = *it.Mode
		}
		out[it.Path] = atomicwriter.FileProjection{Data: v, Mode: m}
	}
	return out, nil
}

// FromObject projects the keys of a ConfigMap or Secret that get returns: a missing object
// is empty when optional, else an error naming it. Errors never contain the data.
func FromObject(kind, name string, get func() (map[string][]byte, error), items []v1.KeyToPath, defaultMode *int32, optional bool) (Files, error) {
	data, err := get()
	switch {
	case apierrors.IsNotFound(err) && optional:
		return Files{}, nil
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s %q not found", kind, name)
	case err != nil:
		return nil, fmt.Errorf("get %s %q: %w", kind, name, err)
	}
	files, err := FromKeys(data, items, defaultMode, optional)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", kind, name, err)
	}
	return files, nil
}

// ConfigMapData merges data and binaryData.
func ConfigMapData(cm *v1.ConfigMap) map[string][]byte {
	out := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		out[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		out[k] = v
	}
	return out
}

// DownwardAPI resolves downward API items for pod. nodeAllocatable stands in for container
// limits that are not set, as upstream.
func DownwardAPI(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode *int32, nodeAllocatable v1.ResourceList) (Files, error) {
	mode := DefaultMode
	if defaultMode != nil {
		mode = *defaultMode
	}
	out := make(Files, len(items))
	for _, it := range items {
		if err := atomicwriter.ValidatePath(it.Path); err != nil {
			return nil, fmt.Errorf("item %q: %w", it.Path, err)
		}
		var val string
		var err error
		switch {
		case it.FieldRef != nil:
			val, err = FieldValue(pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			val, err = resourceValue(pod, it.ResourceFieldRef, nodeAllocatable)
		default:
			err = fmt.Errorf("item %q has neither fieldRef nor resourceFieldRef", it.Path)
		}
		if err != nil {
			return nil, err
		}
		m := mode
		if it.Mode != nil {
			m = *it.Mode
		}
		out[it.Path] = atomicwriter.FileProjection{Data: []byte(val), Mode: m}
	}
	return out, nil
}

// FieldValue resolves a downward API fieldPath of pod.
func FieldValue(pod *v1.Pod, path string) (string, error) {
	if key, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[key], nil
	}
	if key, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[key], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.podIPs":
		ips := make([]string, len(pod.Status.PodIPs))
		for i, ip := range pod.Status.PodIPs {
			ips[i] = ip.IP
		}
		return strings.Join(ips, ","), nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

func subscript(path, prefix string) (string, bool) {
	if !strings.HasPrefix(path, prefix+"['") || !strings.HasSuffix(path, "']") {
		return "", false
	}
	return path[len(prefix)+2 : len(path)-2], true
}

// formatMap renders labels or annotations as upstream does: sorted key="quoted value" lines.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k + "=" + strconv.Quote(m[k]))
	}
	return b.String()
}

// resourceValue resolves a resourceFieldRef: the container's limit or request, divided by
// the divisor and rounded up.
func resourceValue(pod *v1.Pod, ref *v1.ResourceFieldSelector, nodeAllocatable v1.ResourceList) (string, error) {
	c := findContainer(pod, ref.ContainerName)
	if c == nil {
		return "", fmt.Errorf("resourceFieldRef: container %q not found", ref.ContainerName)
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resourceFieldRef: unsupported resource %q", ref.Resource)
	}
	var q resource.Quantity
	switch kind {
	case "limits":
		v, set := c.Resources.Limits[v1.ResourceName(name)]
		if !set {
			v = nodeAllocatable[v1.ResourceName(name)]
		}
		q = v
	case "requests":
		q = c.Resources.Requests[v1.ResourceName(name)]
	default:
		return "", fmt.Errorf("resourceFieldRef: unsupported resource %q", ref.Resource)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if name == string(v1.ResourceCPU) {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for _, list := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name || (name == "" && len(pod.Spec.Containers) == 1) {
				return &list[i]
			}
		}
	}
	return nil
}
