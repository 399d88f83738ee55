package csiclient

import (
	"regexp"
	"strings"
)

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9-]`)

// SanitizeDriverName makes a driver name usable in object names (the sidecars' Lease,
// finalizers) exactly as csi-lib-utils does: every character outside [a-zA-Z0-9-] becomes
// "-", and a trailing "-" gets an "X".
func SanitizeDriverName(driver string) string {
	s := unsafeChars.ReplaceAllString(driver, "-")
	if strings.HasSuffix(s, "-") {
		s += "X"
	}
	return s
}
