package up

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// DriverConfig overrides, for one external driver, what up derives from its capabilities.
// A --driver-config file is YAML (or JSON) keyed by driver name:
//
//	hostpath.csi.k8s.io:
//	  attachRequired: false
//	  fsGroupPolicy: ReadWriteOnceWithFSType
//	  volumeLifecycleModes: [Persistent, Ephemeral]
//	  seLinuxMount: true
//	  nodeAllocatableUpdatePeriodSeconds: 10
//	  storageClass:
//	    volumeBindingMode: Immediate
//	    parameters: {type: fast}
//
// Unset fields keep the derived value. The CSIDriver fields apply only when up creates the
// object; an existing CSIDriver is left as it is, and its attachRequired decides whether
// the attacher runs.
type DriverConfig struct {
	AttachRequired       *bool                           `json:"attachRequired,omitempty"`
	StorageCapacity      *bool                           `json:"storageCapacity,omitempty"`
	PodInfoOnMount       *bool                           `json:"podInfoOnMount,omitempty"`
	RequiresRepublish    *bool                           `json:"requiresRepublish,omitempty"`
	FSGroupPolicy        *storagev1.FSGroupPolicy        `json:"fsGroupPolicy,omitempty"`
	VolumeLifecycleModes []storagev1.VolumeLifecycleMode `json:"volumeLifecycleModes,omitempty"`
	SELinuxMount         *bool                           `json:"seLinuxMount,omitempty"`
	// NodeAllocatableUpdatePeriodSeconds makes the driver's CSINode allocatable count
	// mutable: the node reads NodeGetInfo again at that period (at least 10, as the API
	// server requires).
	NodeAllocatableUpdatePeriodSeconds *int64              `json:"nodeAllocatableUpdatePeriodSeconds,omitempty"`
	StorageClass                       *StorageClassConfig `json:"storageClass,omitempty"`
}

// StorageClassConfig overrides the StorageClass up creates for a driver.
type StorageClassConfig struct {
	VolumeBindingMode *storagev1.VolumeBindingMode `json:"volumeBindingMode,omitempty"`
	Parameters        map[string]string            `json:"parameters,omitempty"`
}

// LoadDriverConfig reads a --driver-config file; its errors name the file and the field.
func LoadDriverConfig(path string) (map[string]DriverConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseDriverConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseDriverConfig decodes and validates a driver configuration. Unknown fields are
// errors: a misspelt override must not be silently ignored.
func ParseDriverConfig(data []byte) (map[string]DriverConfig, error) {
	raw, err := utilyaml.ToJSON(data)
	if err != nil {
		return nil, err
	}
	out := map[string]DriverConfig{}
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("want a map of driver name to settings: %w", err)
	}
	for name, c := range out {
		if err := validateDriverName(name); err != nil {
			return nil, fmt.Errorf("driver %q: %w", name, err)
		}
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("driver %s: %w", name, err)
		}
	}
	return out, nil
}

func (c DriverConfig) validate() error {
	if p := c.FSGroupPolicy; p != nil && !slices.Contains([]storagev1.FSGroupPolicy{storagev1.NoneFSGroupPolicy, storagev1.FileFSGroupPolicy, storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy}, *p) {
		return fmt.Errorf("fsGroupPolicy %q: want None, File or ReadWriteOnceWithFSType", *p)
	}
	for _, m := range c.VolumeLifecycleModes {
		if m != storagev1.VolumeLifecyclePersistent && m != storagev1.VolumeLifecycleEphemeral {
			return fmt.Errorf("volumeLifecycleModes: %q: want Persistent or Ephemeral", m)
		}
	}
	if p := c.NodeAllocatableUpdatePeriodSeconds; p != nil && *p < 10 {
		return fmt.Errorf("nodeAllocatableUpdatePeriodSeconds %d: want at least 10", *p)
	}
	if c.StorageClass != nil {
		if m := c.StorageClass.VolumeBindingMode; m != nil && *m != storagev1.VolumeBindingImmediate && *m != storagev1.VolumeBindingWaitForFirstConsumer {
			return fmt.Errorf("storageClass.volumeBindingMode %q: want Immediate or WaitForFirstConsumer", *m)
		}
	}
	return nil
}

// validateDriverName applies the CSIDriver object's rules to a driver name: a DNS-1123
// subdomain of at most 63 characters.
func validateDriverName(name string) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	errs := validation.IsDNS1123Subdomain(name)
	if len(name) > 63 {
		errs = append(errs, "must be no more than 63 characters")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
