package attacher

import "github.com/kubevol/kubevol/internal/runtime/csiclient"

// Names and keys shared with external-attacher, so that kubevol and upstream can take over
// each other's objects.
const (
	// nodeIDAnnotation records the CSI node ID on the VolumeAttachment at attach time, so a
	// detach still works when the CSINode is gone.
	nodeIDAnnotation = "csi.alpha.kubernetes.io/node-id"
	finalizerPrefix  = "external-attacher/"
)

// Finalizer is the finalizer the attacher puts on VolumeAttachments and PVs of driver.
func Finalizer(driver string) string { return finalizerPrefix + csiclient.SanitizeDriverName(driver) }

func (c *Controller) finalizer() string { return Finalizer(c.cfg.DriverName) }
