package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/redact"
	"github.com/kubevol/kubevol/pkg/volume"
)

// Volume context keys of CSIDriver.podInfoOnMount.
const (
	podNameKey        = "csi.storage.k8s.io/pod.name"
	podNamespaceKey   = "csi.storage.k8s.io/pod.namespace"
	podUIDKey         = "csi.storage.k8s.io/pod.uid"
	serviceAccountKey = "csi.storage.k8s.io/serviceAccount.name"
	ephemeralKey      = "csi.storage.k8s.io/ephemeral"
	// tokensKey carries CSIDriver.tokenRequests' tokens: a JSON map of audience to
	// {"token", "expirationTimestamp"}.
	tokensKey = redact.TokensKey
)

// mounter publishes a volume for one pod: the kubelet's csiMountMgr.
type mounter struct {
	p        *csiPlugin
	spec     *volume.Spec
	pod      *v1.Pod
	src      source
	dir      string
	readOnly bool
	managed  bool
	// republish is set when the driver asks for requiresRepublish.
	republish bool
}

func (m *mounter) Path() string { return filepath.Join(m.dir, "mount") }

// RefreshAfter implements volume.Refresher: a driver with requiresRepublish gets
// NodePublishVolume again every republish period, as every kubelet pod sync does upstream.
func (m *mounter) RefreshAfter() time.Duration {
	if !m.republish {
		return 0
	}
	return m.p.republish
}

func (m *mounter) Attributes() volume.Attributes {
	return volume.Attributes{ReadOnly: m.readOnly, Managed: m.managed}
}

// SetUp implements volume.Mounter: NodePublishVolume to pods/<uid>/volumes/kubernetes.io~csi/
// <volume>/mount, after vol_data.json is written beside it.
func (m *mounter) SetUp(ctx context.Context, args volume.MounterArgs) error {
	src := m.src
	m.readOnly = src.readOnly
	pub, err := m.p.newPublish(ctx, m.spec, m.pod, src, args)
	if err != nil {
		return err
	}
	m.republish = requiresRepublish(pub.driver)
	if err := writeVolData(m.dir, pub.data); err != nil {
		return err
	}
	// The target's parent exists; the driver creates the target, as the CSI spec says the
	// CO must not rely on either way, so the kubelet's behaviour is copied.
	pub.req.TargetPath = m.Path()
	if _, err := pub.node.NodePublishVolume(pub.ctx, pub.req); err != nil {
		if csiclient.MayBeInProgress(err) {
			return volume.NewUncertainError(err)
		}
		_ = removeVolumeDir(m.dir)
		return err
	}
	// fsGroup per CSIDriver.fsGroupPolicy (upstream supportsFSGroup), unless the driver
	// applied it itself through VOLUME_MOUNT_GROUP.
	if pub.mountGroup == "" && args.FsGroup != nil && !src.readOnly && fsGroupApplies(pub.driver, src) {
		m.managed = true
		if err := volume.SetOwnership(m.Path(), args.FsGroup, src.readOnly, args.FSGroupChangePolicy); err != nil {
			return fmt.Errorf("applying fsGroup %d: %w", *args.FsGroup, err)
		}
	}
	return nil
}

// publish is a NodePublishVolume call being prepared for one pod, without its target.
type publish struct {
	node       csipb.NodeClient
	driver     *storagev1.CSIDriver
	req        *csipb.NodePublishVolumeRequest
	data       volData
	mountGroup string
	ctx        context.Context
}

// newPublish gathers what NodePublishVolume needs for a filesystem or a block volume: the
// lifecycle-mode check, publish context, staging path, volume context with pod info and
// tokens, secrets and mount group, and the vol_data.json content.
func (p *csiPlugin) newPublish(ctx context.Context, spec *volume.Spec, pod *v1.Pod, src source, args volume.MounterArgs) (*publish, error) {
	node, caps, err := p.nodeClient(ctx, src.driver)
	if err != nil {
		return nil, err
	}
	drv, err := p.csiDriver(ctx, src.driver)
	if err != nil {
		return nil, err
	}
	mode := storagev1.VolumeLifecyclePersistent
	if src.ephemeral {
		mode = storagev1.VolumeLifecycleEphemeral
	}
	if !supportsMode(drv, mode) {
		return nil, fmt.Errorf("volume mode %q not supported by driver %s (only supports %q)", mode, src.driver, modes(drv))
	}
	pctx, err := p.publishContext(ctx, spec, src)
	if err != nil {
		return nil, err
	}
	staging := ""
	if !src.ephemeral && caps[csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME] {
		staging = p.stagingPath(spec, src)
	}
	vctx := map[string]string{}
	for k, v := range src.attributes {
		vctx[k] = v
	}
	if drv != nil && drv.Spec.PodInfoOnMount != nil && *drv.Spec.PodInfoOnMount {
		vctx[podNameKey] = pod.Name
		vctx[podNamespaceKey] = pod.Namespace
		vctx[podUIDKey] = string(pod.UID)
		vctx[serviceAccountKey] = pod.Spec.ServiceAccountName
		vctx[ephemeralKey] = strconv.FormatBool(src.ephemeral)
	}
	var tokenAttrs map[string]string
	if drv != nil && len(drv.Spec.TokenRequests) > 0 {
		tokens, err := p.podTokens(ctx, pod, drv.Spec.TokenRequests)
		if err != nil {
			return nil, err
		}
		tokenAttrs = map[string]string{tokensKey: tokens}
	}
	secrets, err := p.secretsIn(ctx, pod.Namespace, src.publishSecret)
	if err != nil {
		return nil, err
	}
	// The kubelet (1.35+, CSIServiceAccountTokenSecrets) hands the tokens over in secrets,
	// which no log prints, when the driver opts in; else in the volume context, as before.
	// A secret's key cannot contain "/", so the tokens key never collides with one.
	if tokenAttrs != nil {
		if drv.Spec.ServiceAccountTokenInSecrets != nil && *drv.Spec.ServiceAccountTokenInSecrets {
			if secrets == nil {
				secrets = map[string]string{}
			}
			maps.Copy(secrets, tokenAttrs)
		} else {
			maps.Copy(vctx, tokenAttrs)
		}
	}
	group, err := p.mountGroup(ctx, src, caps, args)
	if err != nil {
		return nil, err
	}
	data := volData{SpecVolumeID: spec.Name(), VolumeHandle: src.handle, DriverName: src.driver,
		NodeName: p.host.NodeName(), LifecycleMode: string(mode), SELinuxMountContext: args.SELinuxLabel}
	if !src.ephemeral {
		if attach, _ := p.CanAttach(spec); attach {
			data.AttachmentID = AttachmentName(src.handle, src.driver, data.NodeName)
		}
	}
	return &publish{node: node, driver: drv, data: data, mountGroup: group, ctx: ctx,
		req: &csipb.NodePublishVolumeRequest{
			VolumeId: src.handle, PublishContext: pctx, StagingTargetPath: staging,
			VolumeCapability: src.capability(group, args.SELinuxLabel, caps), Readonly: src.readOnly, Secrets: secrets, VolumeContext: vctx,
		}}, nil
}

// unmounter unpublishes a pod's volume.
type unmounter struct {
	p   *csiPlugin
	dir string
}

func (u *unmounter) Path() string { return filepath.Join(u.dir, "mount") }

// TearDown implements volume.Unmounter: NodeUnpublishVolume, then the directory and its
// vol_data.json go. A volume whose metadata is gone was never published.
func (u *unmounter) TearDown(ctx context.Context) error {
	data, err := readVolData(u.dir)
	if errors.Is(err, os.ErrNotExist) {
		if mnt, merr := u.p.host.Mounter().IsLikelyNotMountPoint(u.Path()); merr == nil && !mnt {
			return fmt.Errorf("%s is mounted but has no %s: cannot tell which driver owns it", u.Path(), volDataFile)
		}
		return removeVolumeDir(u.dir)
	}
	if err != nil {
		return err
	}
	node, _, err := u.p.nodeClient(ctx, data.DriverName)
	if err != nil {
		return err
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: data.VolumeHandle, TargetPath: u.Path()}); err != nil {
		return err
	}
	return removeVolumeDir(u.dir)
}

func removeVolumeDir(dir string) error {
	return removeAll(filepath.Join(dir, "mount"), filepath.Join(dir, volDataFile), dir)
}

// mountGroup is the fsGroup to hand the driver as VOLUME_MOUNT_GROUP, when the driver has
// that capability and the policy lets fsGroup apply.
func (p *csiPlugin) mountGroup(ctx context.Context, src source, caps map[csipb.NodeServiceCapability_RPC_Type]bool, args volume.MounterArgs) (string, error) {
	if args.FsGroup == nil || !caps[csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP] {
		return "", nil
	}
	drv, err := p.csiDriver(ctx, src.driver)
	if err != nil {
		return "", err
	}
	if !fsGroupApplies(drv, src) {
		return "", nil
	}
	return strconv.FormatInt(*args.FsGroup, 10), nil
}

// fsGroupApplies follows CSIDriver.fsGroupPolicy: File always, None never, and the default
// ReadWriteOnceWithFSType only for a volume with an fsType and ReadWriteOnce access.
func fsGroupApplies(drv *storagev1.CSIDriver, src source) bool {
	policy := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	if drv != nil && drv.Spec.FSGroupPolicy != nil {
		policy = *drv.Spec.FSGroupPolicy
	}
	switch policy {
	case storagev1.FileFSGroupPolicy:
		return true
	case storagev1.NoneFSGroupPolicy:
		return false
	}
	if src.fsType == "" {
		return false
	}
	return src.ephemeral || slices.Contains(src.accessModes, v1.ReadWriteOnce) || slices.Contains(src.accessModes, v1.ReadWriteOncePod)
}

func supportsMode(drv *storagev1.CSIDriver, mode storagev1.VolumeLifecycleMode) bool {
	return slices.Contains(modes(drv), mode)
}

// modes are the CSIDriver's lifecycle modes; no object, or none listed, means Persistent.
func modes(drv *storagev1.CSIDriver) []storagev1.VolumeLifecycleMode {
	if drv == nil || len(drv.Spec.VolumeLifecycleModes) == 0 {
		return []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	return drv.Spec.VolumeLifecycleModes
}

// secrets reads a node-stage or node-expand secret (namespace given by the reference).
func (p *csiPlugin) secrets(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	return p.secretsIn(ctx, ref.Namespace, ref)
}

// secretsIn reads a secret's data as the CSI secrets map; an empty reference namespace is
// the pod's (inline volumes). It is read on every use, as the kubelet's CSI plugin does:
// the node may read it only while a pod of the node uses the volume.
func (p *csiPlugin) secretsIn(ctx context.Context, namespace string, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	if ref.Namespace != "" {
		namespace = ref.Namespace
	}
	s, err := p.host.FetchSecret(ctx, namespace, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("fetching secret %s/%s: %w", namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// podTokens requests a token of the pod's service account, bound to the pod, for each of
// the CSIDriver's tokenRequests (upstream podServiceAccountTokenAttrs).
func (p *csiPlugin) podTokens(ctx context.Context, pod *v1.Pod, reqs []storagev1.TokenRequest) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	type token struct {
		Token               string      `json:"token"`
		ExpirationTimestamp metav1.Time `json:"expirationTimestamp"`
	}
	out := map[string]token{}
	for _, r := range reqs {
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{r.Audience},
			ExpirationSeconds: r.ExpirationSeconds,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		}}
		if r.Audience == "" {
			tr.Spec.Audiences = nil // the API server's audience
		}
		got, err := p.host.GetServiceAccountToken(ctx, pod.Namespace, sa, tr)
		if err != nil {
			return "", fmt.Errorf("request a token of service account %s/%s for audience %q: %w", pod.Namespace, sa, r.Audience, err)
		}
		out[r.Audience] = token{Token: got.Status.Token, ExpirationTimestamp: got.Status.ExpirationTimestamp}
	}
	raw, err := json.Marshal(out)
	return string(raw), err
}
