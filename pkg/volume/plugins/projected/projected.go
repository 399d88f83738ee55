// Package projected is the projected volume plugin: configMap, secret, downwardAPI,
// serviceAccountToken, clusterTrustBundle and podCertificate sources merged into one tmpfs.
// Tokens come from the TokenRequest API, bound to the pod, and are rotated at 80% of their
// lifetime, as the kubelet's token manager does; pod certificates come from
// PodCertificateRequests and are renewed from their beginRefreshAt (package podcertificate).
package projected

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevol/kubevol/pkg/volume"
	"github.com/kubevol/kubevol/pkg/volume/atomicwriter"
	"github.com/kubevol/kubevol/pkg/volume/payload"
	"github.com/kubevol/kubevol/pkg/volume/plugins/configmap"
	"github.com/kubevol/kubevol/pkg/volume/plugins/internal/wrapped"
	"github.com/kubevol/kubevol/pkg/volume/plugins/secret"
	"github.com/kubevol/kubevol/pkg/volume/podcertificate"
)

// PluginName is the upstream plugin name.
const PluginName = "kubernetes.io/projected"

// refreshFraction of a token's lifetime after which it is renewed (kubelet: 80%).
const refreshFraction = 0.8

// New returns the plugin.
func New() volume.Plugin { return NewWithConfig(Config{}) }

// Config configures the plugin; New uses the zero value.
type Config struct {
	// PodCertificates configures how podCertificate sources are served (a fake clock in
	// tests); the zero value is the kubelet's behaviour.
	PodCertificates podcertificate.Config
	// Credentials, when set, serves podCertificate sources from a manager that files and
	// renews their PodCertificateRequests itself (a kubelet's), instead of the plugin's own
	// requests, so that none is filed twice. A volume with such a source is then written
	// again every minute (the kubelet's pod sync) to take the renewals.
	Credentials func(ctx context.Context, pod *v1.Pod, volume string, index int) (key, chain []byte, err error)
}

// credentialsRefresh is how often a volume served by Config.Credentials is written again.
const credentialsRefresh = time.Minute

// NewWithConfig returns the plugin configured by cfg.
func NewWithConfig(cfg Config) volume.Plugin {
	tokens := &tokenCache{byKey: map[tokenKey]*authenticationv1.TokenRequest{}}
	certs := podcertificate.NewStore(cfg.PodCertificates)
	p := wrapped.NewPlugin(wrapped.PluginSpec{
		Name:     PluginName,
		Medium:   v1.StorageMediumMemory,
		Supports: func(s *volume.Spec) bool { return s.Volume.Projected != nil },
		Source:   v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}},
		NewPayload: func(h volume.Host, spec *volume.Spec, pod *v1.Pod) (wrapped.PayloadFunc, func() time.Duration, error) {
			src := spec.Volume.Projected
			build := func(ctx context.Context, args volume.MounterArgs) (payload.Files, error) {
				return collect(ctx, h, sources{tokens, certs, cfg.Credentials}, pod, spec.Name(), src, args)
			}
			refresh := func() time.Duration {
				certsAfter := certs.RefreshAfter(pod.UID, spec.Name())
				if cfg.Credentials != nil && hasPodCertificate(src) {
					certsAfter = credentialsRefresh
				}
				return minPositive(tokens.refreshAfter(pod.UID, src), certsAfter)
			}
			return build, refresh, nil
		},
	})
	return &plugin{Plugin: p, tokens: tokens, certs: certs}
}

// plugin forgets a pod's tokens and certificates when the pod's volume is torn down.
type plugin struct {
	volume.Plugin
	tokens *tokenCache
	certs  *podcertificate.Store
}

func (p *plugin) NewUnmounter(name string, podUID types.UID) (volume.Unmounter, error) {
	p.tokens.forget(podUID)
	p.certs.Forget(podUID, name)
	return p.Plugin.NewUnmounter(name, podUID)
}

// PodCertificateStates counts the podCertificate sources by signer and state, for the
// kubelet's kubelet_podcertificate_states.
func (p *plugin) PodCertificateStates() map[podcertificate.StateKey]int { return p.certs.States() }

// sources are the plugin's credentials that outlive one SetUp.
type sources struct {
	tokens *tokenCache
	certs  *podcertificate.Store
	// credentials is Config.Credentials.
	credentials func(ctx context.Context, pod *v1.Pod, volume string, index int) (key, chain []byte, err error)
}

func hasPodCertificate(src *v1.ProjectedVolumeSource) bool {
	for _, s := range src.Sources {
		if s.PodCertificate != nil {
			return true
		}
	}
	return false
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

func collect(ctx context.Context, h volume.Host, held sources, pod *v1.Pod, volName string, src *v1.ProjectedVolumeSource, args volume.MounterArgs) (payload.Files, error) {
	out := payload.Files{}
	merge := func(f payload.Files) {
		for k, v := range f {
			out[k] = v
		}
	}
	for i, s := range src.Sources {
		switch {
		case s.ConfigMap != nil:
			f, err := configmap.Payload(h, pod.Namespace, &v1.ConfigMapVolumeSource{
				LocalObjectReference: s.ConfigMap.LocalObjectReference, Items: s.ConfigMap.Items,
				DefaultMode: src.DefaultMode, Optional: s.ConfigMap.Optional,
			})
			if err != nil {
				return nil, err
			}
			merge(f)
		case s.Secret != nil:
			f, err := secret.Payload(h, pod.Namespace, s.Secret.Name, s.Secret.Items, src.DefaultMode, s.Secret.Optional)
			if err != nil {
				return nil, err
			}
			merge(f)
		case s.DownwardAPI != nil:
			f, err := payload.DownwardAPI(pod, s.DownwardAPI.Items, src.DefaultMode, h.NodeAllocatable())
			if err != nil {
				return nil, err
			}
			merge(f)
		case s.ServiceAccountToken != nil:
			f, err := tokenFile(ctx, h, held.tokens, pod, s.ServiceAccountToken, src.DefaultMode, args)
			if err != nil {
				return nil, err
			}
			merge(f)
		case s.ClusterTrustBundle != nil:
			if err := atomicwriter.ValidatePath(s.ClusterTrustBundle.Path); err != nil {
				return nil, fmt.Errorf("clusterTrustBundle: %w", err)
			}
			pem, err := h.GetClusterTrustBundle(ctx, *s.ClusterTrustBundle)
			if err != nil {
				if s.ClusterTrustBundle.Optional != nil && *s.ClusterTrustBundle.Optional && apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("clusterTrustBundle: %w", err)
			}
			merge(payload.Files{s.ClusterTrustBundle.Path: {Data: []byte(pem), Mode: mode(src.DefaultMode)}})
		case s.PodCertificate != nil:
			f, err := certificateFiles(ctx, h, held, pod, volName, i, s.PodCertificate, src.DefaultMode, args)
			if err != nil {
				return nil, err
			}
			merge(f)
		default:
			return nil, fmt.Errorf("projected source %d: unsupported source type", i)
		}
	}
	return out, nil
}

func mode(defaultMode *int32) int32 {
	if defaultMode != nil {
		return *defaultMode
	}
	return payload.DefaultMode
}

// tokenFile writes a token as upstream: mode 0600 and owned by the pod's user when the pod
// runs as a fixed user, the volume's default mode otherwise. The token is never logged.
func tokenFile(ctx context.Context, h volume.Host, tokens *tokenCache, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, defaultMode *int32, args volume.MounterArgs) (payload.Files, error) {
	if err := atomicwriter.ValidatePath(src.Path); err != nil {
		return nil, fmt.Errorf("serviceAccountToken: %w", err)
	}
	tok, err := tokens.get(ctx, h, pod, src)
	if err != nil {
		return nil, err
	}
	f := atomicwriter.FileProjection{Data: []byte(tok), Mode: mode(defaultMode)}
	if args.FsUser != nil {
		f.Mode = 0o600
		f.FsUser = args.FsUser
	}
	return payload.Files{src.Path: f}, nil
}

// certificateFiles are a podCertificate source's files, as the kubelet writes them: the
// credential bundle (the key's PEM, then the chain), the key, the chain, each where the
// source says; mode 0600 when the pod runs as a fixed user or has an fsGroup, the volume's
// default mode otherwise. The key is never logged.
func certificateFiles(ctx context.Context, h volume.Host, held sources, pod *v1.Pod, volName string, index int, src *v1.PodCertificateProjection, defaultMode *int32, args volume.MounterArgs) (payload.Files, error) {
	paths := []string{src.CredentialBundlePath, src.KeyPath, src.CertificateChainPath}
	for _, p := range paths {
		if p == "" {
			continue
		}
		if err := atomicwriter.ValidatePath(p); err != nil {
			return nil, fmt.Errorf("podCertificate: %w", err)
		}
	}
	var creds *podcertificate.Credentials
	var err error
	if held.credentials != nil {
		creds = &podcertificate.Credentials{}
		creds.Key, creds.Chain, err = held.credentials(ctx, pod, volName, index)
	} else {
		creds, err = held.certs.Get(ctx, h, pod, volName, index, src)
	}
	if err != nil {
		return nil, fmt.Errorf("podCertificate: %w", err)
	}
	m := mode(defaultMode)
	if args.FsUser != nil || args.FsGroup != nil {
		m = 0o600
	}
	out := payload.Files{}
	for i, data := range [][]byte{append(append([]byte{}, creds.Key...), creds.Chain...), creds.Key, creds.Chain} {
		if paths[i] != "" {
			out[paths[i]] = atomicwriter.FileProjection{Data: data, Mode: m, FsUser: args.FsUser}
		}
	}
	return out, nil
}

type tokenKey struct {
	pod        types.UID
	audience   string
	expiration int64
}

func keyOf(pod types.UID, src *v1.ServiceAccountTokenProjection) tokenKey {
	k := tokenKey{pod: pod, audience: src.Audience, expiration: 3600}
	if src.ExpirationSeconds != nil {
		k.expiration = *src.ExpirationSeconds
	}
	return k
}

// tokenCache keeps one token per pod, audience and lifetime, renewed at 80% of its life.
type tokenCache struct {
	mu    sync.Mutex
	byKey map[tokenKey]*authenticationv1.TokenRequest
}

func (c *tokenCache) get(ctx context.Context, h volume.Host, pod *v1.Pod, src *v1.ServiceAccountTokenProjection) (string, error) {
	key := keyOf(pod.UID, src)
	c.mu.Lock()
	tr := c.byKey[key]
	c.mu.Unlock()
	if tr != nil && time.Until(refreshAt(tr)) > 0 {
		return tr.Status.Token, nil
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &key.expiration,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	resp, err := h.GetServiceAccountToken(ctx, pod.Namespace, sa, req)
	if err != nil {
		return "", fmt.Errorf("request token for service account %q: %w", sa, err)
	}
	// The issue time is not in the response; now is a safe lower bound for the renewal.
	resp.CreationTimestamp.Time = time.Now()
	c.mu.Lock()
	c.byKey[key] = resp
	c.mu.Unlock()
	return resp.Status.Token, nil
}

func refreshAt(tr *authenticationv1.TokenRequest) time.Time {
	issued := tr.CreationTimestamp.Time
	life := tr.Status.ExpirationTimestamp.Sub(issued)
	return issued.Add(time.Duration(float64(life) * refreshFraction))
}

// refreshAfter is the time until the first token of the volume needs renewing; 0 if none.
func (c *tokenCache) refreshAfter(pod types.UID, src *v1.ProjectedVolumeSource) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Duration
	for _, s := range src.Sources {
		if s.ServiceAccountToken == nil {
			continue
		}
		tr := c.byKey[keyOf(pod, s.ServiceAccountToken)]
		if tr == nil {
			continue
		}
		d := time.Until(refreshAt(tr))
		if d < time.Second {
			d = time.Second
		}
		if next == 0 || d < next {
			next = d
		}
	}
	return next
}

func (c *tokenCache) forget(pod types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.byKey {
		if k.pod == pod {
			delete(c.byKey, k)
		}
	}
}
