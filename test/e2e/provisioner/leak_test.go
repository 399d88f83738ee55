package provisioner_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/component/provisioner/intent"
)

// Upstream #486: a claim deleted while CreateVolume is in flight must not leave its volume.
func TestNoLeakWhenClaimDeletedDuringCreateVolume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{driverArgs: []string{"--fault", "CreateVolume:delay=4s"}})
	sc := e.class(nil)
	pvc := e.createClaim(claimSpec("short-lived", sc.Name, "16Mi", nil))
	e.waitEvent(pvc.Name, "Provisioning", "provisioning volume")
	e.deleteClaim(pvc.Name)
	e.waitGone(func(ctx context.Context) error {
		_, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		return err
	}, "claim", time.Minute)
	// CreateVolume finishes after the claim is gone; the volume must be deleted again.
	e.waitVolumes(0, time.Minute)
	e.waitGone(e.pvGetter("pvc-"+string(pvc.UID)), "PV", 5*time.Second)
	e.waitJournalEmpty()
}

// The provisioner is killed after CreateVolume succeeded but before the PV was saved, and
// the claim is deleted while it is down. The record in the provisioning journal names the
// volume after the claim is gone, and the next start deletes the volume. Upstream leaks it
// (its in-progress state is in memory only).
func TestNoLeakWhenKilledBetweenCreateVolumeAndPVSave(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	sc := e.class(nil)
	// Refuse this driver's PVs, so that the provisioner is stuck right after CreateVolume.
	unblock := e.denyPVs()
	pvc := e.createClaim(claimSpec("crash", sc.Name, "16Mi", nil))
	e.waitVolumes(1, time.Minute)
	e.prov.Kill()
	e.deleteClaim(pvc.Name)
	unblock()
	// While no provisioner runs, the journal holds the record of the deleted claim.
	time.Sleep(2 * time.Second)
	if recs := e.journal(); !strings.Contains(recs, string(pvc.UID)) || !strings.Contains(recs, "pvc-"+string(pvc.UID)) {
		t.Fatalf("the provisioning journal should hold the record of the deleted claim %s, holds %s", pvc.UID, recs)
	}
	if vols := e.volumes(); len(vols) != 1 {
		t.Fatalf("precondition: the orphan volume should exist, have %v", vols)
	}
	e.startProvisioner()
	e.waitVolumes(0, time.Minute)
	e.waitGone(func(ctx context.Context) error {
		_, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		return err
	}, "claim", time.Minute)
	e.waitJournalEmpty()
	e.waitGone(e.pvGetter("pvc-"+string(pvc.UID)), "PV", 5*time.Second)
}

// --retry-interval-max also bounds the delay after an infeasible (InvalidArgument) error;
// upstream waits a fixed 5 minutes (the slowSet is built before the option is applied).
func TestInfeasibleRetryHonoursRetryIntervalMax(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{provArgs: []string{"--retry-interval-max", "2s"}})
	sc := e.class(func(sc *storagev1.StorageClass) { sc.Parameters = map[string]string{"type": "tape"} })
	e.createClaim(claimSpec("infeasible", sc.Name, "16Mi", nil))
	e.waitEvent("infeasible", "ProvisioningFailed", "retries will be delayed by 2s")
	re := regexp.MustCompile(`csi_sidecar_operations_seconds_count\{[^}]*grpc_status_code="InvalidArgument",method_name="/csi.v1.Controller/CreateVolume"\} (\d+)`)
	err := wait.PollUntilContextTimeout(e.ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		m := re.FindStringSubmatch(e.metrics())
		if m == nil {
			return false, nil
		}
		n, _ := strconv.Atoi(m[1])
		return n >= 4, nil
	})
	fatalIf(t, err, "CreateVolume was not retried every --retry-interval-max")
}

// With a custom --volume-name-prefix, an existing PV of the real name stops provisioning
// before CreateVolume (upstream checks "pvc-<uid>" whatever the prefix).
func TestExistingPVWithCustomPrefixIsNotReprovisioned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noProv: true, provArgs: []string{"--volume-name-prefix", "vol", "--volume-name-uuid-length", "16"}})
	sc := e.class(nil)
	pvc := e.createClaim(claimSpec("pre", sc.Name, "16Mi", nil))
	name := "vol-" + strings.ReplaceAll(string(pvc.UID), "-", "")[:16]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": e.driver}},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			ClaimRef:    &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: e.ns, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: e.driver, VolumeHandle: "made-by-hand"}},
			StorageClassName:              sc.Name,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		},
	}
	_, err := e.cs.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{})
	fatalIf(t, err, "create PV")
	t.Cleanup(func() {
		_ = e.cs.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	e.startProvisioner()
	e.waitBound(pvc.Name, time.Minute)
	time.Sleep(2 * time.Second)
	if vols := e.volumes(); len(vols) != 0 {
		t.Fatalf("provisioned a second volume for a claim whose PV exists: %v", vols)
	}
}

// A PV of the right name that another driver made is not accepted as ours: the volume just
// created is deleted and the claim gets an event (upstream takes AlreadyExists as success).
func TestForeignPVWithSameNameIsNotAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{driverArgs: []string{"--fault", "CreateVolume:delay=3s"}})
	sc := e.class(nil)
	pvc := e.createClaim(claimSpec("contested", sc.Name, "16Mi", nil))
	e.waitEvent(pvc.Name, "Provisioning", "provisioning volume")
	name := "pvc-" + string(pvc.UID)
	foreign := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			ClaimRef:    &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: e.ns, Name: "someone-else"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "other.example.com", VolumeHandle: "theirs"}},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		},
	}
	_, err := e.cs.CoreV1().PersistentVolumes().Create(e.ctx, foreign, metav1.CreateOptions{})
	fatalIf(t, err, "create foreign PV")
	t.Cleanup(func() {
		_ = e.cs.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	e.waitEvent(pvc.Name, "ProvisioningFailed", "already exists and was not provisioned by "+e.driver)
	e.waitVolumes(0, time.Minute)
	cur, err := e.cs.CoreV1().PersistentVolumes().Get(e.ctx, name, metav1.GetOptions{})
	fatalIf(t, err, "foreign PV")
	if cur.Spec.CSI.Driver != "other.example.com" {
		t.Fatalf("foreign PV was changed: %+v", cur.Spec.CSI)
	}
}

// denyPVs installs a ValidatingAdmissionPolicy that refuses PVs of this driver and returns
// a function that removes it.
func (e *env) denyPVs() func() {
	e.t.Helper()
	name := "deny-" + strings.ReplaceAll(e.driver, ".", "-")
	fail := admissionv1.Deny
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"persistentvolumes"}},
				}}}},
			Validations: []admissionv1.Validation{{
				Expression: `!has(object.spec.csi) || object.spec.csi.driver != "` + e.driver + `"`,
				Message:    "blocked by the test",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{fail}},
	}
	_, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(e.ctx, policy, metav1.CreateOptions{})
	fatalIf(e.t, err, "policy")
	_, err = e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(e.ctx, binding, metav1.CreateOptions{})
	fatalIf(e.t, err, "binding")
	removed := false
	remove := func() {
		if removed {
			return
		}
		removed = true
		_ = e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	e.t.Cleanup(remove)
	// The policy takes effect asynchronously; wait until a dry-run PV is refused.
	probe := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name + "-probe"}, Spec: corev1.PersistentVolumeSpec{
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: *resourceQuantity("1Mi")},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: e.driver, VolumeHandle: "probe"}},
	}}
	err = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().PersistentVolumes().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "blocked by the test"), nil
	})
	fatalIf(e.t, err, "admission policy never took effect")
	return remove
}

// journal returns the records of the driver's provisioning journal in the test's
// namespace, as stored (JSON, one object per shard).
func (e *env) journal() string {
	e.t.Helper()
	leases, err := e.cs.CoordinationV1().Leases(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: intent.Selector(e.driver, "")})
	fatalIf(e.t, err, "list the journal's Leases")
	var recs []string
	for _, l := range leases.Items {
		if r := l.Annotations[intent.AnnotationRecords]; r != "" && r != "{}" {
			recs = append(recs, r)
		}
	}
	return strings.Join(recs, " ")
}

// waitJournalEmpty waits until the provisioning journal holds no record, and no claim of
// the test's namespace carries one in the form of earlier releases.
func (e *env) waitJournalEmpty() {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if e.journal() != "" {
			return false, nil
		}
		claims, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range claims.Items {
			if _, ok := c.Annotations[intent.LegacyAnnotation]; ok || slices.Contains(c.Finalizers, intent.LegacyFinalizer(e.driver)) {
				return false, nil
			}
		}
		return true, nil
	})
	fatalIf(e.t, err, "a provisioning record is left")
}

func resourceQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}
