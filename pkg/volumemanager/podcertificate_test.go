package volumemanager

import (
	"context"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/kubevol/kubevol/internal/testing/podcertsigner"
)

// A pod's podCertificate source is served through the node's own reads and writes: the
// request names the node and its UID and the pod's service account and its UID (what
// NodeRestriction checks), the files appear once the signer issues it, and a request the
// signer denies is a FailedMount naming it, with a Denied event, and no second request.
func TestPodCertificateFlow(t *testing.T) {
	h := newHarness(t)
	rec := record.NewFakeRecorder(100)
	reg := prometheus.NewRegistry()
	h.recorder, h.registerer = rec, reg
	signer, err := podcertsigner.New()
	if err != nil {
		t.Fatal(err)
	}
	var filed atomic.Int32
	// The fake clientset does not generate names; the signer answers at once.
	h.client.PrependReactor("create", "podcertificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.PodCertificateRequest)
		r.Name = fmt.Sprintf("%s%d", r.GenerateName, filed.Add(1))
		if r.Spec.SignerName == "example.com/deny" {
			podcertsigner.Refuse(r, certificatesv1.PodCertificateRequestConditionTypeDenied, "NotAllowed", "pods of ns are not served")
			return false, nil, nil
		}
		now := time.Now()
		return false, nil, signer.Issue(r, now, 2*time.Hour, now.Add(time.Hour))
	})
	ctx := context.Background()
	mustCreate := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = h.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "node-uid"}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = h.client.CoreV1().ServiceAccounts("ns").Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns", UID: "sa-uid"}}, metav1.CreateOptions{})
	mustCreate(err)
	h.start()

	certVolume := func(signerName string) v1.Volume {
		return v1.Volume{Name: "certs", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{PodCertificate: &v1.PodCertificateProjection{SignerName: signerName, KeyType: "ECDSAP256", CredentialBundlePath: "bundle.pem"}},
		}}}}
	}
	good := pod("good", "uid-good", certVolume("example.com/s"))
	good.Spec.ServiceAccountName = "app"
	h.create(good)
	h.eventually("volumes ready", func() bool { return h.obs.get(func(o *observer) bool { return o.ready["uid-good"] == 1 }) })
	if n := filed.Load(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	r, err := h.client.CertificatesV1().PodCertificateRequests("ns").Get(ctx, "req-1", metav1.GetOptions{})
	mustCreate(err)
	if sp := r.Spec; sp.NodeName != "node1" || sp.NodeUID != "node-uid" || sp.ServiceAccountName != "app" || sp.ServiceAccountUID != "sa-uid" ||
		sp.PodName != "good" || sp.PodUID != "uid-good" || sp.SignerName != "example.com/s" {
		t.Errorf("request spec %+v", sp)
	}
	bundle, err := os.ReadFile(filepath.Join(h.root, "pods/uid-good/volumes/kubernetes.io~projected/certs/bundle.pem"))
	mustCreate(err)
	keyBlock, rest := pem.Decode(bundle)
	if keyBlock == nil || keyBlock.Type != "PRIVATE KEY" || string(rest) != r.Status.CertificateChain {
		t.Fatalf("bundle is not the key then the issued chain:\n%s", bundle)
	}
	if err := podcertsigner.CheckPair(bundle, r.Status.CertificateChain, r.Spec.StubPKCS10Request); err != nil {
		t.Error(err)
	}

	denied := pod("denied", "uid-denied", certVolume("example.com/deny"))
	denied.Spec.ServiceAccountName = "app"
	h.create(denied)
	h.eventually("failure reported", func() bool {
		return h.obs.get(func(o *observer) bool { return strings.Contains(o.failed["uid-denied"], "was denied") })
	})
	var failedMount, deniedEvent bool
	h.eventually("FailedMount and Denied events", func() bool {
		for {
			select {
			case e := <-rec.Events:
				failedMount = failedMount || strings.HasPrefix(e, "Warning FailedMount") && strings.Contains(e, `reason="NotAllowed"`) && strings.Contains(e, "ns/req-2")
				deniedEvent = deniedEvent || strings.HasPrefix(e, "Warning Denied PodCertificateRequest ns/req-2 was denied")
			default:
				return failedMount && deniedEvent
			}
		}
	})
	// A retry of the mount finds the refusal final and files nothing more.
	h.settle("uid-denied")
	if n := filed.Load(); n != 2 {
		t.Errorf("%d requests filed, want 2", n)
	}
	if _, err := os.Stat(filepath.Join(h.root, "pods/uid-denied/volumes/kubernetes.io~projected/certs")); !os.IsNotExist(err) {
		t.Errorf("the refused volume left a directory: %v", err)
	}
	want := `
# HELP kubelet_podcertificate_states Gauge vector reporting the number of pod certificate projected volume sources, faceted by signer_name and state.
# TYPE kubelet_podcertificate_states gauge
kubelet_podcertificate_states{signer_name="example.com/deny",state="denied"} 1
kubelet_podcertificate_states{signer_name="example.com/s",state="fresh"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_podcertificate_states"); err != nil {
		t.Error(err)
	}
}
