package volumemanager

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/podcertificate"
)

// errNoClient is why API-backed sources fail in a manager built without Config.Client.
var errNoClient = errors.New("no API client")

// createPodCertificateRequest files a podCertificate source's request as the kubelet does:
// NodeRestriction admits a node's request only if its node name and UID are the node's own
// and its pod, pod UID, service account and service account UID are those of a pod bound
// to the node, so the UIDs are read here (the node may GET its own Node, and the service
// account of a pod bound to it).
func (m *Manager) createPodCertificateRequest(ctx context.Context, pod *v1.Pod, req *certificatesv1.PodCertificateRequest) (*certificatesv1.PodCertificateRequest, error) {
	c := m.cfg.Client
	if c == nil {
		return nil, errNoClient
	}
	node, err := c.CoreV1().Nodes().Get(ctx, m.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get Node %s: %w", m.cfg.NodeName, err)
	}
	sa, err := c.CoreV1().ServiceAccounts(pod.Namespace).Get(ctx, pod.Spec.ServiceAccountName, metav1.GetOptions{})
	if err != nil {
		return nil, accessError(fmt.Errorf("get ServiceAccount %s/%s: %w", pod.Namespace, pod.Spec.ServiceAccountName, err))
	}
	req = req.DeepCopy()
	req.Spec.NodeName = types.NodeName(m.cfg.NodeName)
	req.Spec.NodeUID = node.UID
	req.Spec.ServiceAccountUID = sa.UID
	out, err := c.CertificatesV1().PodCertificateRequests(pod.Namespace).Create(ctx, req, metav1.CreateOptions{})
	return out, accessError(err)
}

// getPodCertificateRequest reads a request by GET, which the Node authorizer grants for a
// request naming the node.
func (m *Manager) getPodCertificateRequest(ctx context.Context, namespace, name string) (*certificatesv1.PodCertificateRequest, error) {
	if m.cfg.Client == nil {
		return nil, errNoClient
	}
	return m.cfg.Client.CertificatesV1().PodCertificateRequests(namespace).Get(ctx, name, metav1.GetOptions{})
}

// podCertificateStater is a plugin that serves podCertificate sources (projected).
type podCertificateStater interface {
	PodCertificateStates() map[podcertificate.StateKey]int
}

// podCertificateStates is the kubelet's kubelet_podcertificate_states{signer_name,state},
// computed at scrape time from the plugins that serve podCertificate sources.
type podCertificateStates struct{ plugins []podCertificateStater }

var podCertificateStatesDesc = prometheus.NewDesc("kubelet_podcertificate_states",
	"Gauge vector reporting the number of pod certificate projected volume sources, faceted by signer_name and state.",
	[]string{"signer_name", "state"}, nil)

// newPodCertificateStates returns the collector of the plugins, nil if none serves the
// sources.
func newPodCertificateStates(plugins []volume.Plugin) prometheus.Collector {
	c := &podCertificateStates{}
	for _, p := range plugins {
		if s, ok := p.(podCertificateStater); ok {
			c.plugins = append(c.plugins, s)
		}
	}
	if len(c.plugins) == 0 {
		return nil
	}
	return c
}

func (c *podCertificateStates) Describe(ch chan<- *prometheus.Desc) { ch <- podCertificateStatesDesc }

func (c *podCertificateStates) Collect(ch chan<- prometheus.Metric) {
	total := map[podcertificate.StateKey]int{}
	for _, p := range c.plugins {
		for k, n := range p.PodCertificateStates() {
			total[k] += n
		}
	}
	for k, n := range total {
		ch <- prometheus.MustNewConstMetric(podCertificateStatesDesc, prometheus.GaugeValue, float64(n), k.Signer, k.State)
	}
}
