package nodecert

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/atomicfile"
)

// Config configures a Manager.
type Config struct {
	// NodeName is the node whose identity (system:node:<NodeName>) is requested.
	NodeName string
	// Kubeconfig is the node's kubeconfig: read if it exists, written after a bootstrap.
	Kubeconfig string
	// CertDir holds the key and certificate (the kubelet's --cert-dir).
	CertDir string
	// Bootstrap authenticates the first request when Kubeconfig holds no usable node
	// certificate, and a renewal once the certificate has expired. Nil: no bootstrap.
	Bootstrap *rest.Config
	// IssueTimeout bounds the wait for one CSR; default 15 min, the kubelet's for a renewal.
	IssueTimeout time.Duration
	// Now and Jitter replace time.Now and rand.Float64 in tests.
	Now    func() time.Time
	Jitter func() float64
	// NewClient builds a client for a config; default kubernetes.NewForConfig. Tests
	// substitute a fake.
	NewClient func(*rest.Config) (kubernetes.Interface, error)
}

// Manager bootstraps the node's client certificate and rotates it, as the kubelet's
// certificate manager does with rotateCertificates on.
type Manager struct {
	cfg   Config
	store Store
}

// New builds a Manager.
func New(cfg Config) *Manager {
	if cfg.IssueTimeout <= 0 {
		cfg.IssueTimeout = 15 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	if cfg.NewClient == nil {
		cfg.NewClient = func(c *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
	}
	return &Manager{cfg: cfg, store: Store{Dir: cfg.CertDir}}
}

// Store is where the manager keeps the pair.
func (m *Manager) Store() Store { return m.store }

// RotationDeadline is when a certificate is renewed: at a uniformly random 70 to 90% of
// its lifetime (jitter in [0,1)), so that nodes started together do not renew together
// (client-go's certificate manager).
func RotationDeadline(leaf *x509.Certificate, jitter float64) time.Time {
	total := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotBefore.Add(time.Duration(float64(total) * (0.7 + 0.2*jitter)))
}

// expiring is how close to its end a certificate is no longer used to renew itself.
const expiring = time.Minute

// Ensure returns the node's client config, first obtaining a certificate through the
// bootstrap credentials when the kubeconfig is missing, unreadable, for another identity,
// or its certificate has expired or is about to.
func (m *Manager) Ensure(ctx context.Context) (*rest.Config, error) {
	logger := klog.FromContext(ctx)
	cfg, leaf, err := m.loadKubeconfig()
	if err == nil && timeLeft(leaf, m.cfg.Now()) > expiring {
		return cfg, nil
	}
	var foreign *foreignError
	if errors.As(err, &foreign) {
		// Someone else's credential (an admin's kubeconfig given by mistake) is never
		// overwritten.
		return nil, fmt.Errorf("kubeconfig %s: %w; refusing to replace it with the node's", m.cfg.Kubeconfig, err)
	}
	if m.cfg.Bootstrap == nil {
		if err == nil {
			err = fmt.Errorf("its certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		return nil, fmt.Errorf("kubeconfig %s: %w, and no bootstrap kubeconfig to obtain a new one", m.cfg.Kubeconfig, err)
	}
	if err != nil {
		logger.Info("No usable node credential, bootstrapping one through a certificate signing request", "kubeconfig", m.cfg.Kubeconfig, "reason", err.Error())
	} else {
		logger.Info("The node certificate expires soon, bootstrapping a new one", "kubeconfig", m.cfg.Kubeconfig, "notAfter", leaf.NotAfter)
	}
	if err := m.bootstrap(ctx); err != nil {
		return nil, err
	}
	cfg, _, err = m.loadKubeconfig()
	return cfg, err
}

// loadKubeconfig reads the node kubeconfig and the certificate it presents.
func (m *Manager) loadKubeconfig() (*rest.Config, *x509.Certificate, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", m.cfg.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	var pair tls.Certificate
	switch {
	case len(cfg.CertData) > 0 && len(cfg.KeyData) > 0:
		pair, err = tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	case cfg.CertFile != "" && cfg.KeyFile != "":
		pair, err = tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	case cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.Username != "":
		return nil, nil, &foreignError{"it authenticates without a client certificate"}
	default:
		return nil, nil, errors.New("it has no client certificate")
	}
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	if err := checkSubject(leaf, m.cfg.NodeName); err != nil {
		return nil, nil, &foreignError{err.Error()}
	}
	return cfg, leaf, nil
}

// foreignError is a kubeconfig that holds a working credential of another identity.
type foreignError struct{ msg string }

func (e *foreignError) Error() string { return e.msg }

// bootstrap requests the first certificate with the bootstrap credentials. The key
// waits in the certificate directory, so a restart finds the same request again.
func (m *Manager) bootstrap(ctx context.Context) error {
	key, err := m.store.PendingKey()
	if err != nil {
		return err
	}
	name, err := BootstrapName(key, m.cfg.NodeName)
	if err != nil {
		return err
	}
	client, err := m.cfg.NewClient(rest.CopyConfig(m.cfg.Bootstrap))
	if err != nil {
		return err
	}
	certPEM, err := Request(ctx, client, key, m.cfg.NodeName, name)
	if errors.Is(err, ErrDenied) {
		// A denied request is final: the next attempt starts from a new key and request.
		_ = m.store.DropPendingKey()
	}
	if err != nil {
		return err
	}
	if err := m.save(ctx, certPEM, key); err != nil {
		return err
	}
	_ = m.store.DropPendingKey()
	return m.writeKubeconfig(m.cfg.Bootstrap)
}

func (m *Manager) save(ctx context.Context, certPEM []byte, key crypto.Signer) error {
	leaf, err := issuedFor(certPEM, key, m.cfg.NodeName)
	if err != nil {
		return err
	}
	if _, err := m.store.Save(certPEM, key); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Node client certificate stored", "path", m.store.CurrentPath(),
		"user", leaf.Subject.CommonName, "notBefore", leaf.NotBefore, "notAfter", leaf.NotAfter)
	return nil
}

// writeKubeconfig points the node kubeconfig at the stored pair, with the server and CA of
// from (the bootstrap config, or the node's own).
func (m *Manager) writeKubeconfig(from *rest.Config) error {
	ca := from.CAData
	if len(ca) == 0 && from.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(from.CAFile); err != nil {
			return err
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default-cluster"] = &clientcmdapi.Cluster{
		Server: from.Host, CertificateAuthorityData: ca, TLSServerName: from.ServerName, InsecureSkipTLSVerify: from.Insecure,
	}
	cfg.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: m.store.CurrentPath(), ClientKey: m.store.CurrentPath()}
	cfg.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default"}
	cfg.CurrentContext = "default-context"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return atomicfile.Write(m.cfg.Kubeconfig, data, 0o600)
}

// Run renews the certificate at its rotation deadline until ctx ends. A renewal is
// requested as the node itself (upstream's selfnodeclient auto-approval), or with the
// bootstrap credentials once the certificate has expired. Failed attempts are retried
// with backoff (2 s doubling, then every 32 s), as client-go's certificate manager does.
func (m *Manager) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		_, leaf, err := m.loadKubeconfig()
		if err != nil {
			// Someone removed or damaged the file under us: say so, and look again later.
			logger.Error(err, "Cannot read the node certificate to schedule its renewal", "kubeconfig", m.cfg.Kubeconfig)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Minute):
				continue
			}
		}
		deadline := RotationDeadline(leaf, m.cfg.Jitter())
		logger.V(2).Info("Node certificate renewal scheduled", "notAfter", leaf.NotAfter, "renewAt", deadline)
		if !sleepUntil(ctx, m.cfg.Now, deadline) {
			return
		}
		backoff := wait.Backoff{Duration: 2 * time.Second, Factor: 2, Steps: 5, Cap: 32 * time.Second}
		for {
			err := m.Rotate(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			d := backoff.Step()
			if backoff.Steps == 0 {
				d = 32 * time.Second
			}
			logger.Error(err, "Node certificate renewal failed, retrying", "retryIn", d)
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
	}
}

// Rotate requests a new certificate for a new key and replaces the current pair.
func (m *Manager) Rotate(ctx context.Context) error {
	self, leaf, err := m.loadKubeconfig()
	if err != nil {
		return err
	}
	auth := self
	if timeLeft(leaf, m.cfg.Now()) <= 0 {
		if m.cfg.Bootstrap == nil {
			return fmt.Errorf("the node certificate expired at %s and there is no bootstrap kubeconfig", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		auth = m.cfg.Bootstrap
	}
	client, err := m.cfg.NewClient(rest.CopyConfig(auth))
	if err != nil {
		return err
	}
	key, err := NewKey()
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.IssueTimeout)
	defer cancel()
	certPEM, err := Request(rctx, client, key, m.cfg.NodeName, "")
	if err != nil {
		if apierrors.IsUnauthorized(err) && m.cfg.Bootstrap != nil && auth != m.cfg.Bootstrap {
			err = fmt.Errorf("%w (the next attempt after expiry uses the bootstrap kubeconfig)", err)
		}
		return err
	}
	if err := m.save(ctx, certPEM, key); err != nil {
		return err
	}
	// A kubeconfig that embedded its certificate now points at the stored pair.
	if self.CertFile != m.store.CurrentPath() || self.KeyFile != m.store.CurrentPath() {
		return m.writeKubeconfig(self)
	}
	return nil
}

// sleepUntil waits until t (by now), or returns false when ctx ends first. It re-reads the
// clock at least hourly, so a suspended machine does not oversleep a deadline.
func sleepUntil(ctx context.Context, now func() time.Time, t time.Time) bool {
	for {
		d := t.Sub(now())
		if d <= 0 {
			return true
		}
		d = min(d, time.Hour)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
	}
}

// TTLMetric is the kubelet's gauge of the seconds left on the node's client certificate.
func (m *Manager) TTLMetric() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "certificate_manager_client_ttl_seconds",
		Help: "Seconds left before the node's client certificate expires; negative once expired.",
	}, func() float64 {
		pair, err := m.store.Current()
		if err != nil {
			return 0
		}
		return timeLeft(pair.Leaf, m.cfg.Now()).Seconds()
	})
}
