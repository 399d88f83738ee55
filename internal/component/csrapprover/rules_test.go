package csrapprover

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubevol/kubevol/internal/component/nodeagent/nodecert"
)

const agentSA = "system:serviceaccount:kubevol-system:kubevol-node"

var rules = Rules{Requesters: []string{agentSA}, NodeSuffix: "-kubevol"}

func request(t *testing.T, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// agentCSR is what the agent of the pod on node "a" files for its companion Node.
func agentCSR(t *testing.T) *certificatesv1.CertificateSigningRequest {
	key, _ := nodecert.NewKey()
	req, err := nodecert.RequestPEM(key, "a-kubevol")
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "node-csr-x"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: req, SignerName: nodecert.SignerName, Usages: nodecert.Usages,
			Username: agentSA,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kubevol-system", "system:authenticated"},
			Extra: map[string]certificatesv1.ExtraValue{
				ExtraNodeName: {"a"}, ExtraPodName: {"kubevol-node-abcde"}, ExtraPodUID: {"1234"},
			},
		},
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name    string
		mutate  func(*certificatesv1.CertificateSigningRequest)
		verdict Verdict
		reason  string
	}{
		{"own node", func(*certificatesv1.CertificateSigningRequest) {}, Approve, "KubevolNodeAgent"},
		{"RSA usages", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Usages = append(r.Spec.Usages, certificatesv1.UsageKeyEncipherment)
		}, Approve, "KubevolNodeAgent"},
		{"another node's name", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Request = request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:b-kubevol", Organization: []string{"system:nodes"}}})
		}, Deny, "NodeMismatch"},
		{"the real kubelet's node", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Request = request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:a", Organization: []string{"system:nodes"}}})
		}, Deny, "NodeMismatch"},
		{"a token from another node's pod", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Extra[ExtraNodeName] = certificatesv1.ExtraValue{"b"}
		}, Deny, "NodeMismatch"},
		{"extra groups", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Request = request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:a-kubevol", Organization: []string{"system:nodes", "system:masters"}}})
		}, Deny, "InvalidSubject"},
		{"groups only system:masters", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Request = request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:a-kubevol", Organization: []string{"system:masters"}}})
		}, Deny, "InvalidSubject"},
		{"SANs", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Request = request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:a-kubevol", Organization: []string{"system:nodes"}},
				IPAddresses: []net.IP{net.ParseIP("10.0.0.1")}})
		}, Deny, "InvalidSubject"},
		{"server auth", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
		}, Deny, "InvalidUsages"},
		{"extra usage", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Usages = append(r.Spec.Usages, certificatesv1.UsageServerAuth)
		}, Deny, "InvalidUsages"},
		{"duplicate usages", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Usages = append(r.Spec.Usages, certificatesv1.UsageClientAuth)
		}, Deny, "InvalidUsages"},
		{"a token not bound to a pod", func(r *certificatesv1.CertificateSigningRequest) {
			delete(r.Spec.Extra, ExtraPodName)
			delete(r.Spec.Extra, ExtraPodUID)
		}, Deny, "NotPodBound"},
		{"no node in the token", func(r *certificatesv1.CertificateSigningRequest) { delete(r.Spec.Extra, ExtraNodeName) }, Deny, "NoNode"},
		{"two nodes in the token", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Extra[ExtraNodeName] = certificatesv1.ExtraValue{"a", "b"}
		}, Deny, "NoNode"},
		{"garbage request", func(r *certificatesv1.CertificateSigningRequest) { r.Spec.Request = []byte("not pem") }, Deny, "InvalidRequest"},
		{"two PEM blocks", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Request = append(r.Spec.Request, request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:b-kubevol"}})...)
		}, Deny, "InvalidRequest"},
		{"serving signer", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.SignerName = certificatesv1.KubeletServingSignerName
		}, Ignore, "OtherSigner"},
		{"client signer", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.SignerName = certificatesv1.KubeAPIServerClientSignerName
		}, Ignore, "OtherSigner"},
		{"another service account", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Username = "system:serviceaccount:default:default"
		}, Ignore, "OtherRequester"},
		{"a node renewing itself", func(r *certificatesv1.CertificateSigningRequest) {
			r.Spec.Username = "system:node:a-kubevol"
		}, Ignore, "OtherRequester"},
		{"already denied", func(r *certificatesv1.CertificateSigningRequest) {
			r.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: "True"}}
		}, Ignore, "Answered"},
		{"already issued", func(r *certificatesv1.CertificateSigningRequest) { r.Status.Certificate = []byte("x") }, Ignore, "Answered"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := agentCSR(t)
			c.mutate(r)
			d := rules.Decide(r)
			if d.Verdict != c.verdict || d.Reason != c.reason {
				t.Errorf("got %v %s (%s), want %v %s", d.Verdict, d.Reason, d.Message, c.verdict, c.reason)
			}
		})
	}
}

func TestDecideRSASignatureForged(t *testing.T) {
	r := agentCSR(t)
	// A request whose signature does not match its key: the requester does not hold the key.
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:a-kubevol", Organization: []string{"system:nodes"}}}, key)
	der[len(der)-1] ^= 0xff
	r.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	if d := rules.Decide(r); d.Verdict != Deny || d.Reason != "InvalidRequest" {
		t.Errorf("got %v %s (%s)", d.Verdict, d.Reason, d.Message)
	}
}

func TestDenyMessageNamesBothNodes(t *testing.T) {
	r := agentCSR(t)
	r.Spec.Extra[ExtraNodeName] = certificatesv1.ExtraValue{"b"}
	d := rules.Decide(r)
	for _, s := range []string{"kubevol-node-abcde", `"system:node:b-kubevol"`, `"system:node:a-kubevol"`} {
		if !strings.Contains(d.Message, s) {
			t.Errorf("message %q does not name %s", d.Message, s)
		}
	}
}

func TestControllerAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	good, bad, other := agentCSR(t), agentCSR(t), agentCSR(t)
	good.Name, bad.Name, other.Name = "good", "bad", "other"
	bad.Spec.Extra[ExtraNodeName] = certificatesv1.ExtraValue{"b"}
	other.Spec.Username = "someone"
	client := fake.NewClientset(good, bad, other)
	c, err := New(Config{Client: client, Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	cond := func(name string) certificatesv1.RequestConditionType {
		r, _ := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if r == nil || len(r.Status.Conditions) == 0 {
			return ""
		}
		return r.Status.Conditions[0].Type
	}
	err = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return cond("good") != "" && cond("bad") != "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cond("good") != certificatesv1.CertificateApproved || cond("bad") != certificatesv1.CertificateDenied || cond("other") != "" {
		t.Errorf("good %q, bad %q, other %q", cond("good"), cond("bad"), cond("other"))
	}
	cancel()
	<-done
}
