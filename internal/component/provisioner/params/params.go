// Package params turns StorageClass parameters into CreateVolume parameters: the reserved
// csi.storage.k8s.io/ keys are interpreted and removed, an unknown reserved key is refused,
// the fsType is resolved, and --extra-create-metadata adds the claim's identity. The rules
// are external-provisioner's.
package params

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kubevol/kubevol/internal/component/provisioner/secrets"
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
	var unknown, fsKeys []string
	for k, v := range params {
		// As upstream, every key that names the fsType counts, whatever its value: the
		// decision cannot depend on the order of a map.
		if k == FSTypeKey || strings.EqualFold(k, legacyFSTypeKey) {
			fsKeys = append(fsKeys, k)
			out.FSType = v
		}
		if strings.HasPrefix(k, secrets.Prefix) {
			if !allowed[k] {
				unknown = append(unknown, k)
			}
			continue
		}
		// The deprecated keys stay in the parameters, as upstream keeps them: drivers of that
		// era read them there.
		out.Parameters[k] = v
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return Result{}, fmt.Errorf("found unknown parameter key %q with reserved namespace %s: remove it from the StorageClass, or fix its spelling", unknown[0], secrets.Prefix)
	}
	if len(fsKeys) > 1 {
		slices.Sort(fsKeys)
		return Result{}, fmt.Errorf("StorageClass sets the fsType more than once (%s): keep only %s", strings.Join(fsKeys, ", "), FSTypeKey)
	}
	if out.FSType == "" {
		out.FSType = defaultFSType // an empty value too, as upstream
	}
	if meta != nil {
		maps.Copy(out.Parameters, map[string]string{PVCNameKey: meta.PVCName, PVCNamespaceKey: meta.PVCNamespace, PVNameKey: meta.PVName})
	}
	return out, nil
}
