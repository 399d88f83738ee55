package attacher

import (
	"regexp"
	"strings"
)

// Names and keys shared with external-attacher, so that kubevol and upstream can take over
// each other's objects.
const (
	// nodeIDAnnotation records the CSI node ID on the VolumeAttachment at attach time, so a
	// detach still works when the CSINode is gone.
	nodeIDAnnotation = "csi.alpha.kubernetes.io/node-id"
	finalizerPrefix  = "external-attacher/"
)

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9-]`)

// SanitizeDriverName makes a driver name usable in a finalizer, exactly as upstream does:
// every character outside [a-zA-Z0-9-] becomes "-", and a trailing "-" gets an "X".
func SanitizeDriverName(driver string) string {
	s := unsafeChars.ReplaceAllString(driver, "-")
	if strings.HasSuffix(s, "-") {
		s += "X"
	}
	return s
}

// Finalizer is the finalizer the attacher puts on VolumeAttachments and PVs of driver.
func Finalizer(driver string) string { return finalizerPrefix + SanitizeDriverName(driver) }

func (c *Controller) finalizer() string { return Finalizer(c.cfg.DriverName) }
