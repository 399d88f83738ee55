package up

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
)

var httpEndpoint = regexp.MustCompile(`^--http-endpoint=:(\d+)$`)

// onHostNetwork puts the rendered workloads in the host's network namespace. The pods of
// `kubevol up --runtime containerd` have no route out of their bridge (no kube-proxy, the
// apiserver listens on loopback only; the test machine's traffic stays local), so a pod
// could neither reach the apiserver at its Service address nor be probed by the kubelet.
// On the host network the in-cluster configuration reaches the apiserver on loopback
// (KUBERNETES_SERVICE_HOST/PORT, which a container's own env overrides), and each
// --http-endpoint binds the node's address on a free port (the probes follow the named
// ports) instead of a fixed port of the shared machine. Every other argument stays deploy/'s.
// On the one node a second replica would claim the same host ports (the scheduler keeps it
// Pending), so each Deployment runs one.
func onHostNetwork(t *testing.T, objs []*unstructured.Unstructured, apiserver, nodeIP string) {
	t.Helper()
	u, err := url.Parse(apiserver)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		var tmpl *corev1.PodTemplateSpec
		var typed any
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			typed, tmpl = d, &d.Spec.Template
		case "DaemonSet":
			d := &appsv1.DaemonSet{}
			typed, tmpl = d, &d.Spec.Template
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, typed); err != nil {
			t.Fatal(err)
		}
		if d, ok := typed.(*appsv1.Deployment); ok {
			d.Spec.Replicas = ptr.To[int32](1)
		}
		tmpl.Spec.HostNetwork = true
		for i := range tmpl.Spec.Containers {
			c := &tmpl.Spec.Containers[i]
			c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: u.Hostname()},
				corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: u.Port()})
			for j, a := range c.Args {
				m := httpEndpoint.FindStringSubmatch(a)
				if m == nil {
					continue
				}
				ports, err := localcluster.FreePorts(1)
				if err != nil {
					t.Fatal(err)
				}
				c.Args[j] = fmt.Sprintf("--http-endpoint=%s:%d", nodeIP, ports[0])
				for k := range c.Ports {
					if strconv.Itoa(int(c.Ports[k].ContainerPort)) == m[1] {
						c.Ports[k].ContainerPort = int32(ports[0])
					}
				}
			}
		}
		out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
		if err != nil {
			t.Fatal(err)
		}
		o.Object = out
	}
}
