// Package csrapprover approves the client certificate requests of kubevol node agents that
// run as a DaemonSet. An agent authenticates with its pod's service-account token, which
// the API server binds to the pod and the node it runs on; the approver grants the agent of
// node N only system:node:N<suffix> (the companion Node that agent registers), so no
// credential on one node can obtain another node's identity. Upstream's csrapproving
// controller does the same for kubelets through SubjectAccessReviews on the
// nodeclient/selfnodeclient subresources; this approver keys on the token's node instead.
package csrapprover

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/kubevol/kubevol/internal/component/nodeagent/nodecert"
)

// User extras the API server records in a CSR created with a pod-bound service-account
// token; the requester cannot forge them.
const (
	ExtraNodeName = "authentication.kubernetes.io/node-name"
	ExtraPodName  = "authentication.kubernetes.io/pod-name"
	ExtraPodUID   = "authentication.kubernetes.io/pod-uid"
)

// Rules decide which requests are answered.
type Rules struct {
	// Requesters are the user names (system:serviceaccount:<ns>:<name>) of the node agents.
	// Requests by anyone else are left to other approvers.
	Requesters []string
	// NodeSuffix follows the token's node name in the one node name that may be requested.
	NodeSuffix string
}

// Verdict is what the approver does with a request.
type Verdict int

const (
	// Ignore leaves the request to other approvers (or to nobody).
	Ignore Verdict = iota
	Approve
	Deny
)

func (v Verdict) String() string { return [...]string{"ignore", "approve", "deny"}[v] }

// Decision is a verdict with the reason recorded in the CSR condition, event and log.
type Decision struct {
	Verdict Verdict
	Reason  string
	Message string
}

func deny(reason, format string, args ...any) Decision {
	return Decision{Verdict: Deny, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Decide applies the rules to csr.
func (r Rules) Decide(csr *certificatesv1.CertificateSigningRequest) Decision {
	if answered(csr) {
		return Decision{Verdict: Ignore, Reason: "Answered", Message: "already approved, denied, failed or issued"}
	}
	if csr.Spec.SignerName != nodecert.SignerName {
		return Decision{Verdict: Ignore, Reason: "OtherSigner", Message: "signer " + csr.Spec.SignerName}
	}
	if !slices.Contains(r.Requesters, csr.Spec.Username) {
		return Decision{Verdict: Ignore, Reason: "OtherRequester", Message: "requested by " + csr.Spec.Username + ", not a kubevol node agent"}
	}
	// From here on the request comes from a node agent's service account: anything it asks
	// beyond its own node's identity is refused for good, not left pending.
	podName, nodeName := csr.Spec.Extra[ExtraPodName], csr.Spec.Extra[ExtraNodeName]
	if len(podName) != 1 || podName[0] == "" || len(csr.Spec.Extra[ExtraPodUID]) != 1 {
		return deny("NotPodBound", "requested with a service-account token not bound to a pod; a node agent must use its pod's token")
	}
	if len(nodeName) != 1 || nodeName[0] == "" {
		return deny("NoNode", "the token of pod %s names no node", podName[0])
	}
	want := nodecert.NodeUserPrefix + nodeName[0] + r.NodeSuffix
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		return deny("InvalidRequest", "%v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return deny("InvalidRequest", "the request's signature does not verify: %v", err)
	}
	if s := req.Subject; len(s.Organization) != 1 || s.Organization[0] != nodecert.NodesGroup {
		return deny("InvalidSubject", "the organizations (groups) must be exactly [%s], got %v", nodecert.NodesGroup, s.Organization)
	}
	if cn := req.Subject.CommonName; cn != want {
		return deny("NodeMismatch", "pod %s runs on node %s, so it may request only %q, not %q", podName[0], nodeName[0], want, cn)
	}
	if n := len(req.DNSNames) + len(req.EmailAddresses) + len(req.IPAddresses) + len(req.URIs); n > 0 {
		return deny("InvalidSubject", "a node client certificate has no subject alternative names; the request has %d", n)
	}
	if !kubeletClientUsages(csr.Spec.Usages) {
		return deny("InvalidUsages", "usages must be [digital signature, client auth] (plus key encipherment), got %v", csr.Spec.Usages)
	}
	return Decision{Verdict: Approve, Reason: "KubevolNodeAgent",
		Message: fmt.Sprintf("approved by kubevol: pod %s on node %s asked for %s", podName[0], nodeName[0], want)}
}

func answered(csr *certificatesv1.CertificateSigningRequest) bool {
	if len(csr.Status.Certificate) > 0 {
		return true
	}
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return true
		}
	}
	return false
}

func parseRequest(p []byte) (*x509.CertificateRequest, error) {
	b, rest := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE REQUEST" || strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("the request is not exactly one PEM CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(b.Bytes)
}

// kubeletClientUsages is upstream's rule for a kubelet client certificate: exactly
// {digital signature, client auth}, or those plus key encipherment (RSA keys).
func kubeletClientUsages(u []certificatesv1.KeyUsage) bool {
	set := map[certificatesv1.KeyUsage]bool{}
	for _, x := range u {
		set[x] = true
	}
	if len(set) != len(u) || !set[certificatesv1.UsageDigitalSignature] || !set[certificatesv1.UsageClientAuth] {
		return false
	}
	return len(set) == 2 || (len(set) == 3 && set[certificatesv1.UsageKeyEncipherment])
}
