package volume

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/mount-utils"
)

// Host is what plugins get from their environment (upstream: VolumeHost).
type Host interface {
	// Paths is the node's directory layout (the kubelet's root directory).
	Paths() Paths
	// NodeName is the name of the node the volumes are set up on.
	NodeName() string
	// Mounter mounts, unmounts and lists the mounts of the host.
	Mounter() mount.Interface
	// KubeClient may be nil in unit tests and in standalone use.
	KubeClient() kubernetes.Interface
	Recorder() record.EventRecorder
	GetConfigMap(namespace, name string) (*v1.ConfigMap, error)
	GetSecret(namespace, name string) (*v1.Secret, error)
	// FetchSecret reads a secret a volume names for its driver (CSI node-stage,
	// node-publish and node-expand secrets), by GET on every use.
	FetchSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	// GetVolumeAttachment reads a VolumeAttachment by GET.
	GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
	// GetServiceAccountToken requests a token bound to a pod (TokenRequest API).
	GetServiceAccountToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	// GetClusterTrustBundle returns the PEM of the named bundle, or of every bundle of the
	// signer that matches the selector; a NotFound error if the API is not served.
	GetClusterTrustBundle(ctx context.Context, source v1.ClusterTrustBundleProjection) (string, error)
	// CreatePodCertificateRequest creates a request of a projected podCertificate source
	// (certificates.k8s.io/v1) in the pod's namespace, after filling in what
	// NodeRestriction checks against the node and the pod's service account: spec.nodeName,
	// spec.nodeUID and spec.serviceAccountUID.
	CreatePodCertificateRequest(ctx context.Context, pod *v1.Pod, req *certificatesv1.PodCertificateRequest) (*certificatesv1.PodCertificateRequest, error)
	// GetPodCertificateRequest reads a request by name.
	GetPodCertificateRequest(ctx context.Context, namespace, name string) (*certificatesv1.PodCertificateRequest, error)
	NodeAllocatable() v1.ResourceList
	// NewWrapperMounter returns the Mounter of spec under another plugin's name: secret,
	// configMap, downwardAPI and projected volumes are emptyDirs underneath.
	// The wrapped volume is named "wrapped_<volumeName>".
	NewWrapperMounter(volumeName string, spec *Spec, pod *v1.Pod) (WrappableMounter, error)
	NewWrapperUnmounter(volumeName string, spec *Spec, podUID types.UID) (WrappableUnmounter, error)
}

// HostConfig configures NewHost. Getter funcs left nil answer with an error.
type HostConfig struct {
	Paths      Paths
	NodeName   string
	Mounter    mount.Interface
	KubeClient kubernetes.Interface
	Recorder   record.EventRecorder

	ConfigMapGetter   func(namespace, name string) (*v1.ConfigMap, error)
	SecretGetter      func(namespace, name string) (*v1.Secret, error)
	SecretFetcher     func(ctx context.Context, namespace, name string) (*v1.Secret, error)
	AttachmentGetter  func(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
	TokenGetter       func(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	TrustBundleGetter func(ctx context.Context, source v1.ClusterTrustBundleProjection) (string, error)
	// PodCertificateCreator and PodCertificateGetter are CreatePodCertificateRequest and
	// GetPodCertificateRequest.
	PodCertificateCreator func(ctx context.Context, pod *v1.Pod, req *certificatesv1.PodCertificateRequest) (*certificatesv1.PodCertificateRequest, error)
	PodCertificateGetter  func(ctx context.Context, namespace, name string) (*certificatesv1.PodCertificateRequest, error)
	NodeAllocatableFunc   func() v1.ResourceList
}

type host struct {
	cfg     HostConfig
	plugins *PluginManager
}

func (h *host) Paths() Paths                     { return h.cfg.Paths }
func (h *host) NodeName() string                 { return h.cfg.NodeName }
func (h *host) Mounter() mount.Interface         { return h.cfg.Mounter }
func (h *host) KubeClient() kubernetes.Interface { return h.cfg.KubeClient }

func (h *host) Recorder() record.EventRecorder {
	if h.cfg.Recorder == nil {
		return &record.FakeRecorder{}
	}
	return h.cfg.Recorder
}

func (h *host) GetConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	if h.cfg.ConfigMapGetter == nil {
		return nil, fmt.Errorf("no configMap getter configured")
	}
	return h.cfg.ConfigMapGetter(namespace, name)
}

func (h *host) GetSecret(namespace, name string) (*v1.Secret, error) {
	if h.cfg.SecretGetter == nil {
		return nil, fmt.Errorf("no secret getter configured")
	}
	return h.cfg.SecretGetter(namespace, name)
}

func (h *host) FetchSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	if h.cfg.SecretFetcher == nil {
		return nil, fmt.Errorf("no secret fetcher configured")
	}
	return h.cfg.SecretFetcher(ctx, namespace, name)
}

func (h *host) GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	if h.cfg.AttachmentGetter == nil {
		return nil, fmt.Errorf("no VolumeAttachment getter configured")
	}
	return h.cfg.AttachmentGetter(ctx, name)
}

func (h *host) GetServiceAccountToken(ctx context.Context, namespace, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	if h.cfg.TokenGetter == nil {
		return nil, fmt.Errorf("no service account token getter configured")
	}
	return h.cfg.TokenGetter(ctx, namespace, sa, req)
}

func (h *host) GetClusterTrustBundle(ctx context.Context, source v1.ClusterTrustBundleProjection) (string, error) {
	if h.cfg.TrustBundleGetter == nil {
		return "", fmt.Errorf("no cluster trust bundle getter configured")
	}
	return h.cfg.TrustBundleGetter(ctx, source)
}

func (h *host) CreatePodCertificateRequest(ctx context.Context, pod *v1.Pod, req *certificatesv1.PodCertificateRequest) (*certificatesv1.PodCertificateRequest, error) {
	if h.cfg.PodCertificateCreator == nil {
		return nil, fmt.Errorf("no PodCertificateRequest creator configured")
	}
	return h.cfg.PodCertificateCreator(ctx, pod, req)
}

func (h *host) GetPodCertificateRequest(ctx context.Context, namespace, name string) (*certificatesv1.PodCertificateRequest, error) {
	if h.cfg.PodCertificateGetter == nil {
		return nil, fmt.Errorf("no PodCertificateRequest getter configured")
	}
	return h.cfg.PodCertificateGetter(ctx, namespace, name)
}

func (h *host) NodeAllocatable() v1.ResourceList {
	if h.cfg.NodeAllocatableFunc == nil {
		return nil
	}
	return h.cfg.NodeAllocatableFunc()
}

func (h *host) NewWrapperMounter(volumeName string, spec *Spec, pod *v1.Pod) (WrappableMounter, error) {
	p, err := h.plugins.FindBySpec(spec)
	if err != nil {
		return nil, err
	}
	m, err := p.NewMounter(renamed(spec, wrappedName(volumeName)), pod)
	if err != nil {
		return nil, err
	}
	wm, ok := m.(WrappableMounter)
	if !ok {
		return nil, fmt.Errorf("volume plugin %q cannot be wrapped", p.Name())
	}
	return wm, nil
}

func (h *host) NewWrapperUnmounter(volumeName string, spec *Spec, podUID types.UID) (WrappableUnmounter, error) {
	p, err := h.plugins.FindBySpec(spec)
	if err != nil {
		return nil, err
	}
	u, err := p.NewUnmounter(wrappedName(volumeName), podUID)
	if err != nil {
		return nil, err
	}
	wu, ok := u.(WrappableUnmounter)
	if !ok {
		return nil, fmt.Errorf("volume plugin %q cannot be wrapped", p.Name())
	}
	return wu, nil
}

func wrappedName(name string) string { return "wrapped_" + name }

// renamed gives the wrapped spec its own name, so the wrapped plugin's private data
// (emptyDir's ready marker) does not collide with the outer plugin's.
func renamed(spec *Spec, name string) *Spec {
	if spec.Volume == nil {
		return spec
	}
	v := *spec.Volume
	v.Name = name
	return &Spec{Volume: &v, ReadOnly: spec.ReadOnly}
}
