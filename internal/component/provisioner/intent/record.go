package intent

import (
	"encoding/json"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Record describes one CreateVolume that may have taken effect.
type Record struct {
	// ClaimUID keys the record; the claim's namespace and name are for logs and events.
	ClaimUID  types.UID `json:"-"`
	Namespace string    `json:"ns"`
	Claim     string    `json:"claim"`
	PVName    string    `json:"pv"`
	// VolumeID is set once CreateVolume has answered; until it is written, a cleanup after
	// a restart repeats CreateVolume to learn it.
	VolumeID string `json:"volumeID,omitempty"`
	// Request is the CreateVolumeRequest without secrets (protobuf), to repeat it (CSI
	// CreateVolume is idempotent by name) when the volume ID is not known.
	Request []byte `json:"request,omitempty"`
	// Secret is the provisioner secret for CreateVolume and DeleteVolume.
	Secret *corev1.SecretReference `json:"secret,omitempty"`
}

// maxRequestBytes bounds the request kept in a record, so that a shard holds many records.
// A larger request is not kept: a cleanup after a restart then cannot learn the volume's
// ID by repeating CreateVolume, and says so.
const maxRequestBytes = 32 << 10

// ErrUnrecorded says that the journal cannot be written (no rights on Leases). Add returns
// it once per claim, and the provisioner goes on with the record in memory only.
var ErrUnrecorded = errors.New("the provisioning journal cannot be written")

// ErrFull says that every shard is full: the claim waits until records are dropped.
var ErrFull = errors.New("the provisioning journal is full: too many volumes in flight")

func sameRequest(a, b Record) bool {
	return a.PVName == b.PVName && string(a.Request) == string(b.Request) && a.Secret.String() == b.Secret.String()
}

// size is the record's share of its shard's annotation.
func size(uid types.UID, r Record) int {
	b, _ := json.Marshal(r)
	return len(b) + len(uid) + 4
}

func encode(recs map[types.UID]Record) (string, error) {
	b, err := json.Marshal(recs)
	return string(b), err
}

func decode(s string) (map[types.UID]Record, error) {
	recs := map[types.UID]Record{}
	if s == "" {
		return recs, nil
	}
	if err := json.Unmarshal([]byte(s), &recs); err != nil {
		return nil, err
	}
	for uid, r := range recs {
		r.ClaimUID = uid
		recs[uid] = r
	}
	return recs, nil
}
