package intent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// LegacyAnnotation held a claim's record, as JSON, in earlier releases, together with
// LegacyFinalizer, which kept a deleted claim until its record was dealt with. Such a
// record is moved into the journal and both are removed from the claim.
const LegacyAnnotation = "provisioning.kubevol.io/intent"

// LegacyFinalizer is the finalizer earlier releases of driver's provisioner put on a claim
// with a record.
func LegacyFinalizer(driver string) string {
	return "provisioning.kubevol.io/" + csiclient.SanitizeDriverName(driver)
}

type legacyRecord struct {
	Driver  string                  `json:"driver"`
	Node    string                  `json:"node,omitempty"`
	PVName  string                  `json:"pv"`
	Request []byte                  `json:"request,omitempty"`
	Secret  *corev1.SecretReference `json:"secret,omitempty"`
}

// Legacy returns the record of an earlier release on pvc, if it is this instance's: of
// this driver and node. An unreadable record with the driver's finalizer is returned
// without a request to a central provisioner (a cleanup then finds the PV or gives up on
// the volume, and the claim is never stuck), not to a --node-deployment instance, which
// cannot tell whose it is.
func (j *Journal) Legacy(pvc *corev1.PersistentVolumeClaim) (Record, bool) {
	ours := slices.Contains(pvc.Finalizers, LegacyFinalizer(j.driver))
	s, ok := pvc.Annotations[LegacyAnnotation]
	if !ok && !ours {
		return Record{}, false
	}
	var l legacyRecord
	if err := json.Unmarshal([]byte(s), &l); err != nil || l.Driver != j.driver {
		if !ours || j.node != "" {
			return Record{}, false
		}
		l = legacyRecord{}
	} else if l.Node != j.node {
		return Record{}, false
	}
	return Record{ClaimUID: pvc.UID, Namespace: pvc.Namespace, Claim: pvc.Name, PVName: l.PVName, Request: l.Request, Secret: l.Secret}, true
}

// ReleaseLegacy removes the record of an earlier release (annotation and finalizer) from
// claim with an update, reading the claim again on a conflict. A claim gone (or replaced)
// meanwhile has nothing left to release.
func (j *Journal) ReleaseLegacy(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	fin := LegacyFinalizer(j.driver)
	_, err := write.ClaimFinalizers(j.client).Mutate(ctx, claim, func(cur *corev1.PersistentVolumeClaim) bool {
		_, annotated := cur.Annotations[LegacyAnnotation]
		delete(cur.Annotations, LegacyAnnotation)
		return write.SetFinalizers(cur, false, fin) || annotated
	})
	if err = write.IgnoreNotFound(err); err != nil {
		return fmt.Errorf("removing the provisioning record of an earlier release from claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	return nil
}
