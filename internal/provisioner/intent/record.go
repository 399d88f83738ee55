// Package intent is the provisioner's durable record of volumes it may have created on the
// backend but not yet recorded in a PersistentVolume. A record is written, and waited for,
// before CreateVolume; it is dropped once the PV exists or the volume is deleted. After a
// crash, or when a claim is deleted while CreateVolume is in flight, the record says which
// backend volume to delete, which closes external-provisioner issue #486.
//
// The record lives on the claim itself: an annotation holding the request, and a finalizer
// that keeps a deleted claim (and so its record) until the provisioner has either handed
// the volume to a PV or deleted it. Both are written with UPDATE, the one claim write
// external-provisioner's role grants, so the guarantee needs no right beyond upstream's.
//
// Where the update is refused (a role without it), the provisioner degrades to upstream's
// behaviour for that claim: the record is kept in memory only, which covers a claim deleted
// while this process runs but not a crash, and the claim gets one log line and one event
// that say so.
package intent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/csiclient"
)

// Annotation holds a claim's record, as JSON.
const Annotation = "provisioning.kubevol.io/intent"

// finalizerPrefix names the provisioner's finalizer on claims with a record; the driver's
// sanitized name follows, so provisioners of two drivers never release each other's.
const finalizerPrefix = "provisioning.kubevol.io/"

// maxRequestBytes bounds the request kept in the annotation (all annotations of an object
// share 256 KiB). A larger request is not kept: a cleanup after a restart then cannot
// learn the volume's ID by repeating CreateVolume, and says so.
const maxRequestBytes = 64 << 10

// Finalizer is the finalizer the provisioner of driver puts on a claim with a record.
func Finalizer(driver string) string {
	return finalizerPrefix + csiclient.SanitizeDriverName(driver)
}

// ErrUnrecorded wraps the API's refusal to write a claim's record. Add returns it once per
// claim, and the provisioner goes on with the record in memory only.
var ErrUnrecorded = errors.New("the provisioning record cannot be written to the claim")

// Record describes one CreateVolume that may have taken effect.
type Record struct {
	ClaimUID  types.UID `json:"-"`
	Namespace string    `json:"-"`
	Claim     string    `json:"-"`
	// Driver is the provisioner's driver; a record of another driver is not ours.
	Driver string `json:"driver"`
	// Node is the node of the --node-deployment instance that wrote the record ("" for a
	// central provisioner). The instances of one driver share the finalizer, so the node
	// is what tells one instance's records from another's.
	Node   string `json:"node,omitempty"`
	PVName string `json:"pv"`
	// VolumeID is set once CreateVolume has answered (in memory only: until the PV
	// exists, a cleanup after a restart repeats CreateVolume to learn it).
	VolumeID string `json:"-"`
	// Request is the CreateVolumeRequest without secrets (protobuf), to repeat it (CSI
	// CreateVolume is idempotent by name) when the volume ID is not known.
	Request []byte `json:"request,omitempty"`
	// Secret is the provisioner secret for CreateVolume and DeleteVolume.
	Secret *corev1.SecretReference `json:"secret,omitempty"`
}

// Journal is the set of records, cached in memory and written to the claims.
type Journal struct {
	client    kubernetes.Interface
	driver    string
	node      string
	finalizer string

	mu      sync.Mutex
	records map[types.UID]Record
	// unrecorded holds the claims whose record the API refused, each reported once.
	unrecorded map[types.UID]bool
}

// New returns the journal of driver's provisioner; node is the node of a --node-deployment
// instance, "" for a central provisioner.
func New(client kubernetes.Interface, driver, node string) *Journal {
	return &Journal{client: client, driver: driver, node: node, finalizer: Finalizer(driver),
		records: map[types.UID]Record{}, unrecorded: map[types.UID]bool{}}
}

// Finalizer is the finalizer this journal puts on claims.
func (j *Journal) Finalizer() string { return j.finalizer }

// Load reads the records left on claims by earlier runs. Call it once, before any Add.
func (j *Journal) Load(ctx context.Context) ([]Record, error) {
	var out []Record
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := j.client.CoreV1().PersistentVolumeClaims("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("reading the provisioning records of claims: %w", err)
		}
		for i := range list.Items {
			if r, ok := j.Parse(&list.Items[i]); ok {
				out = append(out, r)
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, r := range out {
		j.records[r.ClaimUID] = r
	}
	return out, nil
}

// Parse returns the record on pvc, if it is this driver's and this instance's. A record that
// cannot be read but comes with our finalizer is returned without a request, so that a
// cleanup finds the PV or gives up on the volume and the claim is never stuck; except for a
// --node-deployment instance, which cannot tell whose it is: another node's instance may be
// in the middle of that CreateVolume, and only it may clean up after it.
func (j *Journal) Parse(pvc *corev1.PersistentVolumeClaim) (Record, bool) {
	ours := slices.Contains(pvc.Finalizers, j.finalizer)
	s, ok := pvc.Annotations[Annotation]
	if !ok && !ours {
		return Record{}, false
	}
	var r Record
	if err := json.Unmarshal([]byte(s), &r); err != nil || r.Driver != j.driver {
		if !ours || j.node != "" {
			return Record{}, false
		}
		r = Record{Driver: j.driver}
	} else if r.Node != j.node {
		return Record{}, false
	}
	r.ClaimUID, r.Namespace, r.Claim = pvc.UID, pvc.Namespace, pvc.Name
	return r, true
}

// Add stores r on claim (replacing any earlier record) and returns once it is durable,
// with the claim as stored. A refused write gives ErrUnrecorded the first time for the
// claim and nil after: the record is then in memory only.
func (j *Journal) Add(ctx context.Context, claim *corev1.PersistentVolumeClaim, r Record) (*corev1.PersistentVolumeClaim, error) {
	r.ClaimUID, r.Namespace, r.Claim, r.Driver, r.Node = claim.UID, claim.Namespace, claim.Name, j.driver, j.node
	if len(r.Request) > maxRequestBytes {
		r.Request = nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return claim, err
	}
	j.mu.Lock()
	j.records[r.ClaimUID] = r
	unrecorded := j.unrecorded[r.ClaimUID]
	j.mu.Unlock()
	if unrecorded {
		return claim, nil
	}
	if claim.Annotations[Annotation] == string(data) && slices.Contains(claim.Finalizers, j.finalizer) {
		return claim, nil // a retry of a record already written
	}
	cur := claim.DeepCopy()
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[Annotation] = string(data)
	if !slices.Contains(cur.Finalizers, j.finalizer) {
		cur.Finalizers = append(cur.Finalizers, j.finalizer)
	}
	out, err := j.client.CoreV1().PersistentVolumeClaims(cur.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
	if apierrors.IsForbidden(err) && !j.liveClaim(ctx, claim) {
		// The API server answers 403 as well when a finalizer is added to an object being
		// deleted: that is no missing right, and nothing may be created for the claim.
		j.mu.Lock()
		delete(j.records, r.ClaimUID)
		j.mu.Unlock()
		return claim, fmt.Errorf("the claim is being deleted: %w", err)
	}
	if apierrors.IsForbidden(err) {
		j.mu.Lock()
		j.unrecorded[r.ClaimUID] = true
		j.mu.Unlock()
		return claim, fmt.Errorf("%w: %w", ErrUnrecorded, err)
	}
	if err != nil {
		j.mu.Lock()
		delete(j.records, r.ClaimUID)
		j.mu.Unlock()
		return claim, err
	}
	return out, nil
}

// liveClaim reports whether the API server holds claim, not being deleted: only then is a
// refused write a missing right. Any doubt (an error, another UID) counts as not live.
func (j *Journal) liveClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim) bool {
	cur, err := j.stored(ctx, claim.Namespace, claim.Name, claim.UID)
	return err == nil && cur != nil && cur.DeletionTimestamp == nil
}

// stored reads the claim from the API server: nil when it is gone or has another UID.
func (j *Journal) stored(ctx context.Context, ns, name string, uid types.UID) (*corev1.PersistentVolumeClaim, error) {
	cur, err := j.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading claim %s/%s: %w", ns, name, err)
	}
	if cur.UID != uid {
		return nil, nil
	}
	return cur, nil
}

// Stored reports whether r is still written on its claim in the API server. A record read
// from the informer's cache may be one this process has already removed (the cache shows a
// claim version from before the removal): acting on it after the volume was deleted would
// create the volume again for nobody.
func (j *Journal) Stored(ctx context.Context, r Record) (bool, error) {
	cur, err := j.stored(ctx, r.Namespace, r.Claim, r.ClaimUID)
	if err != nil || cur == nil {
		return false, err
	}
	stored, ok := j.Parse(cur)
	return ok && stored.PVName == r.PVName, nil
}

// SetVolumeID records, in memory, the ID CreateVolume returned.
func (j *Journal) SetVolumeID(uid types.UID, id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r, ok := j.records[uid]; ok {
		r.VolumeID = id
		j.records[uid] = r
	}
}

// Remove drops the record of a claim: from memory, and from claim (the cached copy, or nil
// when the claim is gone) with an update. On a conflict it reads the claim again and
// retries; any other error is returned, and the record stays on the claim (and in memory)
// for the next sync to remove.
func (j *Journal) Remove(ctx context.Context, uid types.UID, claim *corev1.PersistentVolumeClaim) error {
	j.mu.Lock()
	rec, had := j.records[uid]
	delete(j.records, uid)
	j.mu.Unlock()
	err := j.removeFromClaim(ctx, uid, claim)
	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil && had {
		if _, again := j.records[uid]; !again {
			j.records[uid] = rec
		}
		return err
	}
	delete(j.unrecorded, uid)
	return err
}

func (j *Journal) removeFromClaim(ctx context.Context, uid types.UID, claim *corev1.PersistentVolumeClaim) error {
	for attempt := 0; claim != nil && claim.UID == uid; attempt++ {
		_, annotated := claim.Annotations[Annotation]
		if !annotated && !slices.Contains(claim.Finalizers, j.finalizer) {
			return nil
		}
		cur := claim.DeepCopy()
		delete(cur.Annotations, Annotation)
		cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == j.finalizer })
		_, err := j.client.CoreV1().PersistentVolumeClaims(cur.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err) || attempt >= 2:
			return fmt.Errorf("removing the provisioning record of claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		if claim, err = j.client.CoreV1().PersistentVolumeClaims(cur.Namespace).Get(ctx, cur.Name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
	}
	return nil
}

// Get returns the record of a claim.
func (j *Journal) Get(uid types.UID) (Record, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r, ok := j.records[uid]
	return r, ok
}

// Len is the number of records.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.records)
}

// OnlyRecordChanged reports whether cur differs from old in this journal's record alone (its
// annotation and finalizer, and the resourceVersion and managed fields that come with any
// write): an update the provisioner made itself, which gives its sync nothing new to do.
// Syncing again on it made a claim whose CreateVolume failed at once retry in a loop, each
// pass writing the record and removing it, whatever the retry interval.
func (j *Journal) OnlyRecordChanged(old, cur *corev1.PersistentVolumeClaim) bool {
	strip := func(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
		c := pvc.DeepCopy()
		c.ResourceVersion, c.ManagedFields = "", nil
		delete(c.Annotations, Annotation)
		if len(c.Annotations) == 0 {
			c.Annotations = nil
		}
		c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == j.finalizer })
		if len(c.Finalizers) == 0 {
			c.Finalizers = nil
		}
		return c
	}
	if old == nil || cur == nil {
		return false
	}
	recordChanged := old.Annotations[Annotation] != cur.Annotations[Annotation] ||
		slices.Contains(old.Finalizers, j.finalizer) != slices.Contains(cur.Finalizers, j.finalizer)
	return recordChanged && equality.Semantic.DeepEqual(strip(old), strip(cur))
}
