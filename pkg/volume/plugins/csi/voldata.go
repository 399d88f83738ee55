package csi

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// volDataFile is the kubelet's name of the metadata file beside a mount.
const volDataFile = "vol_data.json"

// volData is vol_data.json in the kubelet's format (its volDataKey names), written beside
// every publish target and every staging path, so a restarted agent, or a kubelet, can
// rebuild the volume.
type volData struct {
	SpecVolumeID  string `json:"specVolumeID,omitempty"`
	VolumeHandle  string `json:"volumeHandle"`
	DriverName    string `json:"driverName"`
	NodeName      string `json:"nodeName,omitempty"`
	AttachmentID  string `json:"attachmentID,omitempty"`
	LifecycleMode string `json:"volumeLifecycleMode,omitempty"`
	// SELinuxMountContext is the context the volume was mounted with, if any.
	SELinuxMountContext string `json:"seLinuxMountContext,omitempty"`
}

func writeVolData(dir string, d volData) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+volDataFile+".tmp")
	if err := os.WriteFile(tmp, raw, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, volDataFile))
}

func readVolData(dir string) (volData, error) {
	var d volData
	raw, err := os.ReadFile(filepath.Join(dir, volDataFile))
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("%s: %w", filepath.Join(dir, volDataFile), err)
	}
	if d.DriverName == "" {
		return d, fmt.Errorf("%s has no driverName", filepath.Join(dir, volDataFile))
	}
	return d, nil
}
