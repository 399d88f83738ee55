package volumemanager

import (
	"context"
	"errors"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
