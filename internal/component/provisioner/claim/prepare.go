package claim

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/component/provisioner/params"
	"github.com/kubevol/kubevol/internal/component/provisioner/pvspec"
	"github.com/kubevol/kubevol/internal/component/provisioner/secrets"
	"github.com/kubevol/kubevol/internal/component/provisioner/topology"
	"github.com/kubevol/kubevol/internal/runtime/apicheck"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/internal/runtime/sizes"
)

// prepared is a CreateVolume request and what the PV needs besides the response.
type prepared struct {
	req            *csi.CreateVolumeRequest
	requestedBytes int64
	fsType         string
	secrets        pvspec.Secrets
}

// stopError ends a claim's processing without retry (e.g. an external populator's claim).
type stopError struct{ msg string }

func (e *stopError) Error() string { return e.msg }

// infeasibleError is a claim that no retry can provision until it changes.
type infeasibleError struct{ err error }

func (e *infeasibleError) Error() string { return e.err.Error() }
func (e *infeasibleError) Unwrap() error { return e.err }

// rescheduleError asks for a new node: the selected one cannot host the volume.
type rescheduleError struct{ err error }

func (e *rescheduleError) Error() string { return e.err.Error() }
func (e *rescheduleError) Unwrap() error { return e.err }

func (c *Controller) prepare(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, pvName, selectedNode string) (*prepared, error) {
	caps := c.cfg.Caps
	if !caps.Plugin[csi.PluginCapability_Service_CONTROLLER_SERVICE] || !caps.Controller[csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME] {
		return nil, fmt.Errorf("CSI driver %s does not support dynamic provisioning (no CONTROLLER_SERVICE with CREATE_DELETE_VOLUME)", c.cfg.DriverName)
	}
	if claim.Spec.Selector != nil {
		return nil, errors.New("claim Selector is not supported: remove spec.selector to provision dynamically, or create a matching PersistentVolume by hand")
	}
	size, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return nil, errors.New("claim has no spec.resources.requests.storage: say how large the volume must be")
	}
	// Upstream sends Value(), which wraps, zeroes or saturates a size beyond int64; here such
	// a claim never reaches the driver.
	requested, err := sizes.Bytes("requested storage", size)
	if err != nil {
		return nil, &infeasibleError{err}
	}
	var meta *params.Metadata
	if c.cfg.ExtraCreateMetadata {
		meta = &params.Metadata{PVCName: claim.Name, PVCNamespace: claim.Namespace, PVName: pvName}
	}
	p, err := params.Interpret(class.Parameters, c.cfg.DefaultFSType, meta)
	if err != nil {
		return nil, fmt.Errorf("StorageClass %q: %w", class.Name, err)
	}
	vcaps, err := pvspec.VolumeCapabilities(claim, p.FSType, class.MountOptions, caps.Controller[csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER])
	if err != nil {
		return nil, fmt.Errorf("unsupported access mode: %w; use ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod", err)
	}
	out := &prepared{
		requestedBytes: requested,
		fsType:         p.FSType,
		req: &csi.CreateVolumeRequest{
			Name:               pvName,
			Parameters:         p.Parameters,
			VolumeCapabilities: vcaps,
			CapacityRange:      &csi.CapacityRange{RequiredBytes: requested},
		},
	}
	if out.req.VolumeContentSource, err = c.contentSource(ctx, claim, class, requested); err != nil {
		return nil, err
	}
	if c.topology {
		if out.req.AccessibilityRequirements, err = c.requirements(claim, class, selectedNode); err != nil {
			return nil, err
		}
	}
	if err := c.resolveSecrets(ctx, claim, class, pvName, out); err != nil {
		return nil, err
	}
	if vacName := claim.Spec.VolumeAttributesClassName; vacName != nil && *vacName != "" {
		if !caps.Controller[csi.ControllerServiceCapability_RPC_MODIFY_VOLUME] {
			return nil, fmt.Errorf("claim names VolumeAttributesClass %q but CSI driver %s does not support MODIFY_VOLUME", *vacName, c.cfg.DriverName)
		}
		if c.cfg.NoAttributesClasses {
			return nil, fmt.Errorf("claim names VolumeAttributesClass %q but the apiserver does not serve %s", *vacName, apicheck.VolumeAttributesClasses)
		}
		vac, err := c.cfg.Client.StorageV1().VolumeAttributesClasses().Get(ctx, *vacName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("VolumeAttributesClass %q: %w", *vacName, err)
		}
		if vac.DriverName != c.cfg.DriverName {
			return nil, fmt.Errorf("VolumeAttributesClass %q is for driver %s, not %s", *vacName, vac.DriverName, c.cfg.DriverName)
		}
		out.req.MutableParameters = vac.Parameters
	}
	return out, nil
}

func (c *Controller) requirements(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, selectedNode string) (*csi.TopologyRequirement, error) {
	in := topology.Input{
		Driver: c.cfg.DriverName, AllowedTopologies: class.AllowedTopologies,
		Strict: c.cfg.StrictTopology, Immediate: c.cfg.ImmediateTopology, ClaimName: claim.Name,
	}
	if selectedNode != "" {
		node, err := c.nodes.Get(selectedNode)
		if apierrors.IsNotFound(err) {
			return nil, &rescheduleError{fmt.Errorf("selected node %s no longer exists", selectedNode)}
		} else if err != nil {
			return nil, err
		}
		csiNode, err := c.csiNodes.Get(selectedNode)
		if apierrors.IsNotFound(err) {
			return nil, &rescheduleError{fmt.Errorf("selected node %s has no CSINode: the %s node plugin is not registered there", selectedNode, c.cfg.DriverName)}
		} else if err != nil {
			return nil, err
		}
		in.SelectedNode, in.SelectedCSINode = node, csiNode
	}
	var err error
	if in.Nodes, err = c.nodes.List(labels.Everything()); err != nil {
		return nil, err
	}
	if in.CSINodes, err = c.csiNodes.List(labels.Everything()); err != nil {
		return nil, err
	}
	req, err := topology.Requirements(in)
	if err != nil {
		return nil, fmt.Errorf("error generating accessibility requirements: %w", err)
	}
	return req, nil
}

func (c *Controller) resolveSecrets(ctx context.Context, claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, pvName string, out *prepared) error {
	sc := secrets.Claim{PVName: pvName, Name: claim.Name, Namespace: claim.Namespace, Annotations: claim.Annotations}
	s := &out.secrets
	for k, dst := range map[secrets.Kind]**corev1.SecretReference{
		secrets.Provisioner: &s.Provisioner, secrets.ControllerPublish: &s.ControllerPublish,
		secrets.NodeStage: &s.NodeStage, secrets.NodePublish: &s.NodePublish,
		secrets.ControllerExpand: &s.ControllerExpand, secrets.NodeExpand: &s.NodeExpand,
		secrets.ControllerModify: &s.ControllerModify,
	} {
		ref, err := secrets.Ref(k, class.Parameters, sc)
		if err != nil {
			return fmt.Errorf("StorageClass %q: %w", class.Name, err)
		}
		*dst = ref
	}
	data, err := fetchSecret(ctx, c.cfg.Client, s.Provisioner)
	if err != nil {
		return fmt.Errorf("cannot read the provisioner secret named by StorageClass %q: %w; create it or fix the class's secret parameters", class.Name, err)
	}
	out.req.Secrets = data
	return nil
}

func fetchSecret(ctx context.Context, client kubernetes.Interface, ref *corev1.SecretReference) (map[string]string, error) {
	return csiclient.FetchSecrets(ctx, client, ref)
}
