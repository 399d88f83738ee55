package attacher

import (
	"context"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// reasonNotPublished is the Warning event of a VolumeAttachment whose volume the driver
// no longer reports as published to its node.
const reasonNotPublished = "NotPublished"

// reconciles says whether the driver can tell which nodes its volumes are published to.
// As upstream's supportsControllerCapabilities, that takes both LIST_VOLUMES and
// LIST_VOLUMES_PUBLISHED_NODES; a driver without ControllerPublish has nothing to reconcile
// (upstream's trivial handler ignores ReconcileVA).
func reconciles(caps *csiclient.Capabilities) bool {
	return caps.Controller[publishCapability] &&
		caps.Controller[csi.ControllerServiceCapability_RPC_LIST_VOLUMES] &&
		caps.Controller[csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES]
}

// reconcile is one pass of external-attacher's ReconcileVA (--reconcile-sync): it compares
// status.attached of the driver's VolumeAttachments with the published nodes the driver
// reports in ListVolumes, and sends every mismatch back to the attach queue.
//
// As upstream, it never writes the VolumeAttachment: an attached one whose volume lost its
// node is marked for republishing (syncVA then calls ControllerPublishVolume although
// status.attached is true), so the node and the attach/detach controller never see it flip
// to false; an unattached one that the driver reports published is just queued again,
// which skips its backoff. VolumeAttachments being deleted are left to the detach.
func (c *Controller) reconcile(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	logger.V(4).Info("Reconciling VolumeAttachments with the driver's published nodes")
	// The cache is read before ListVolumes: a VolumeAttachment it shows attached was
	// published before the listing began, so its absence there is not a publish in flight.
	vas, err := c.vaLister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	published, err := c.publishedNodes(ctx)
	if err != nil {
		return err
	}
	for _, va := range vas {
		if va.Spec.Attacher != c.cfg.DriverName || va.DeletionTimestamp != nil {
			continue
		}
		c.reconcileVA(klog.NewContext(ctx, logger.WithValues("volumeAttachment", va.Name, "node", va.Spec.NodeName)), va, published)
	}
	return nil
}

func (c *Controller) reconcileVA(ctx context.Context, va *storagev1.VolumeAttachment, published map[string][]string) {
	logger := klog.FromContext(ctx)
	src, err := c.source(va)
	if err != nil {
		logger.V(4).Info("Skipping VolumeAttachment in the reconcile", "err", err)
		return
	}
	nodeID, err := c.nodeID(va)
	if err != nil {
		logger.V(4).Info("Skipping VolumeAttachment in the reconcile", "err", err)
		return
	}
	found := slices.Contains(published[src.csi.VolumeHandle], nodeID)
	if found == va.Status.Attached {
		return
	}
	if !va.Status.Attached && !c.settled(va.Name) {
		// Published but shown unattached while a sync runs or its status write has not
		// reached the cache: the sync is what published it, nothing to repair (upstream
		// would publish again, harmlessly but needlessly).
		return
	}
	logger.Info("VolumeAttachment status differs from the driver's published nodes, syncing it again",
		"volumeID", src.csi.VolumeHandle, "nodeID", nodeID, "attached", va.Status.Attached, "published", found)
	if va.Status.Attached {
		c.recorder.Eventf(va, corev1.EventTypeWarning, reasonNotPublished,
			"Driver %s reports volume %s not published to node %s (ListVolumes); publishing it again", c.cfg.DriverName, src.csi.VolumeHandle, nodeID)
		c.republish.Set(va.Name)
	}
	c.queueOf(va).Add(va.Name)
}

// publishedNodes pages through ListVolumes (upstream --max-entries per page) and returns the
// published node IDs by volume ID. Each page gets its own --timeout, so a long listing does
// not fail for its length alone.
func (c *Controller) publishedNodes(ctx context.Context) (map[string][]string, error) {
	published := map[string][]string{}
	token := ""
	for {
		cctx, cancel := c.cfg.CSI.WithTimeout(ctx)
		rsp, err := c.cfg.CSI.Controller.ListVolumes(cctx, &csi.ListVolumesRequest{MaxEntries: c.cfg.MaxEntries, StartingToken: token})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("ListVolumes: %w", err)
		}
		for _, e := range rsp.GetEntries() {
			published[e.GetVolume().GetVolumeId()] = e.GetStatus().GetPublishedNodeIds()
		}
		next := rsp.GetNextToken()
		if next == "" {
			return published, nil
		}
		if next == token {
			// A driver that hands back the token it was given would keep this loop forever.
			return nil, fmt.Errorf("ListVolumes returned its starting token %q as next_token", token)
		}
		token = next
	}
}
