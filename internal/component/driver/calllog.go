package driver

import (
	"bytes"
	"encoding/json"
	"os"
	"sync"
	"time"
)

// CallRecord is one line of the call log: which RPC ran, on what, when, and how it ended.
// End-to-end tests read it to check the order in which a CO drove the driver, for example
// NodeUnpublish, NodeUnstage, ControllerUnpublish, DeleteVolume.
type CallRecord struct {
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Method     string    `json:"method"`
	VolumeID   string    `json:"volumeID,omitempty"`
	SnapshotID string    `json:"snapshotID,omitempty"`
	// GroupSnapshotID is the subject of a DeleteVolumeGroupSnapshot or
	// GetVolumeGroupSnapshot.
	GroupSnapshotID string `json:"groupSnapshotID,omitempty"`
	NodeID          string `json:"nodeID,omitempty"`
	Name            string `json:"name,omitempty"`
	Path            string `json:"path,omitempty"`
	// SELinuxContext is the value of a context= mount flag of a NodeStageVolume or
	// NodePublishVolume, which tests read to see the CO's SELinux choice (KEP-1710). No
	// other mount flag is kept: a driver's options may carry credentials.
	SELinuxContext string `json:"seLinuxContext,omitempty"`
	// Endpoint is the socket the call came in on: a driver serving several (--extra-endpoint)
	// tells its callers apart by it, one socket per caller.
	Endpoint string `json:"endpoint,omitempty"`
	Code     string `json:"code"`
}

// callLog appends JSON lines to a file shared by every RPC.
type callLog struct {
	mu sync.Mutex
	f  *os.File
}

func openCallLog(path string) (*callLog, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &callLog{f: f}, nil
}

func (l *callLog) write(r CallRecord) {
	if l == nil {
		return
	}
	line, err := json.Marshal(r)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// One write per line: O_APPEND keeps lines whole even with two drivers on one file.
	_, _ = l.f.Write(append(line, '\n'))
}

func (l *callLog) close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

// ReadCallLog parses a call log file.
func ReadCallLog(path string) ([]CallRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []CallRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var r CallRecord
		if err := dec.Decode(&r); err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}
