// Package params turns StorageClass parameters into CreateVolume parameters: the reserved
// csi.storage.k8s.io/ keys are interpreted and removed, an unknown reserved key is refused,
// the fsType is resolved, and --extra-create-metadata adds the claim's identity. The rules
// are external-provisioner's.
package params

import (
	"fmt"
	"maps"
	"strings"

	"github.com/kubevol/kubevol/internal/provisioner/secrets"
)

// Reserved keys besides the secret pairs.
const (
	FSTypeKey       = secrets.Prefix + "fstype"
	legacyFSTypeKey = "fstype" // any letter case, deprecated

	PVCNameKey      = secrets.Prefix + "pvc/name"
	PVCNamespaceKey = secrets.Prefix + "pvc/namespace"
	PVNameKey       = secrets.Prefix + "pv/name"
)

// Metadata is what --extra-create-metadata adds to the parameters.
type Metadata struct {
	PVCName, PVCNamespace, PVName string
}

// Result is the interpretation of a StorageClass's parameters.
type Result struct {
	// Parameters go to CreateVolumeRequest.parameters.
	Parameters map[string]string
	// FSType is the resolved filesystem type ("" when neither the class nor the default sets one).
	FSType string
}

// Interpret strips the reserved keys of params, resolves the fsType (falling back to
// defaultFSType) and adds meta when it is not nil.
func Interpret(params map[string]string, defaultFSType string, meta *Metadata) (Result, error) {
	allowed := map[string]bool{FSTypeKey: true, secrets.Default.NameKey: true, secrets.Default.NamespaceKey: true}
	for _, k := range secrets.All {
		allowed[k.NameKey], allowed[k.NamespaceKey] = true, true
	}
	out := Result{Parameters: make(map[string]string, len(params)+3)}
	var legacyFS string
	for k, v := range params {
		if strings.HasPrefix(k, secrets.Prefix) {
			if !allowed[k] {
				return Result{}, fmt.Errorf("found unknown parameter key %q with reserved namespace %s: remove it from the StorageClass, or fix its spelling", k, secrets.Prefix)
			}
			continue
		}
		// The deprecated keys stay in the parameters, as upstream keeps them: drivers of that
		// era read them there.
		if strings.EqualFold(k, legacyFSTypeKey) {
			if legacyFS != "" {
				return Result{}, fmt.Errorf("StorageClass sets the fsType twice with different letter cases of %q", legacyFSTypeKey)
			}
			legacyFS = v
		}
		out.Parameters[k] = v
	}
	fs, hasFS := params[FSTypeKey]
	switch {
	case hasFS && legacyFS != "":
		return Result{}, fmt.Errorf("StorageClass sets both %s and the deprecated %s: keep only %s", FSTypeKey, legacyFSTypeKey, FSTypeKey)
	case hasFS:
		out.FSType = fs
	case legacyFS != "":
		out.FSType = legacyFS
	default:
		out.FSType = defaultFSType
	}
	if meta != nil {
		maps.Copy(out.Parameters, map[string]string{PVCNameKey: meta.PVCName, PVCNamespaceKey: meta.PVCNamespace, PVNameKey: meta.PVName})
	}
	return out, nil
}
