package up

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/component/snapshotter/crds"
)

// conversionCert names the webhook's serving certificate in the cluster's PKI.
const conversionCert = "snapshot-conversion-webhook"

// startConversionWebhook runs `kubevol snapshot-conversion-webhook` on a loopback port with
// a serving certificate of the cluster's CA, as upstream's example deploys it with a
// certificate the API server trusts, and returns where the VolumeGroupSnapshotContent CRD
// must send its conversions. It runs before the CRDs are installed: with storage version
// v1beta2, every v1 read of a group content goes through it.
func (s *Stack) startConversionWebhook(ctx context.Context) (*crds.Webhook, error) {
	pki := s.Cluster.PKI()
	if err := pki.EnsureServer(conversionCert, "kubevol-snapshot-conversion-webhook", "127.0.0.1"); err != nil {
		return nil, fmt.Errorf("conversion webhook certificate: %w", err)
	}
	ca, err := os.ReadFile(pki.CAFile())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("conversion webhook: the cluster CA file holds no certificate")
	}
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	args := []string{"snapshot-conversion-webhook", "--tls-cert-file", pki.CertFile(conversionCert), "--tls-private-key-file", pki.KeyFile(conversionCert),
		"--port", strconv.Itoa(ports[0]), "--bind-address", "127.0.0.1"}
	c := newComponent("kubevol snapshot-conversion-webhook", s.opts.KubevolBinary, args, s.Cluster.LogPath("kubevol-snapshot-conversion-webhook"), "")
	// Its health is upstream's /readyz on the TLS port, verified as the API server does.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	c.check = func(ctx context.Context) error { return probeWith(ctx, client, "https://"+addr+"/readyz") }
	if err := s.startComponent(ctx, c, &s.procs); err != nil {
		return nil, err
	}
	return &crds.Webhook{URL: "https://" + addr + "/convert", CABundle: ca}, nil
}
