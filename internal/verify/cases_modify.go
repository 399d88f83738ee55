package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/mount-utils"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// DefaultModifyParameters are the parameters of the modification cases' class for
// kubevol's own driver (*.kubevol.io): its readOnly mutable parameter, which the pod's
// mount shows. Other drivers get none unless --modify-parameters says otherwise.
var DefaultModifyParameters = map[string]string{"readOnly": "true"}

// DefaultInfeasibleModifyParameters are the parameters of the infeasible class: a key no
// driver knows, which csi-sanity requires a driver to refuse with INVALID_ARGUMENT.
var DefaultInfeasibleModifyParameters = map[string]string{"verify.kubevol.io/unknown-key": "unknown-value"}

func modifyCases() []*testCase {
	return []*testCase{
		{name: "modify/class", applies: modifyApplies, run: modifyClass},
		{name: "modify/infeasible", applies: modifyApplies, run: modifyInfeasible},
	}
}

func (e *env) defaultModifyParameters() {
	if e.o.ModifyParameters == nil && strings.HasSuffix(e.driver, ".kubevol.io") {
		e.o.ModifyParameters = DefaultModifyParameters
	}
	if e.o.InfeasibleModifyParameters == nil {
		e.o.InfeasibleModifyParameters = DefaultInfeasibleModifyParameters
	}
}

func modifyApplies(e *env) string {
	if why := e.lacks(csi.ControllerServiceCapability_RPC_MODIFY_VOLUME); why != "" {
		return why
	}
	if len(e.o.ModifyParameters) == 0 {
		return "verify was not told the parameters of a VolumeAttributesClass the driver accepts (--modify-parameters)"
	}
	rl, err := e.cs.Discovery().ServerResourcesForGroupVersion(storagev1.SchemeGroupVersion.String())
	if err != nil || !slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == "volumeattributesclasses" }) {
		return "the cluster does not serve storage.k8s.io/v1 VolumeAttributesClasses"
	}
	return ""
}

// attributesClass creates a VolumeAttributesClass of the driver for the case; the returned
// function deletes it (the apiserver keeps it until no claim or PV names it).
func (k *caseEnv) attributesClass(suffix string, params map[string]string) (string, func(), error) {
	name := k.ns + "-" + suffix
	_, err := k.cs.StorageV1().VolumeAttributesClasses().Create(k.ctx, &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: k.runID}},
		DriverName: k.driver,
		Parameters: params,
	}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("create VolumeAttributesClass %s: %w", name, err)
	}
	return name, func() { _ = k.cs.StorageV1().VolumeAttributesClasses().Delete(k.ctx, name, metav1.DeleteOptions{}) }, nil
}

// setClass edits the claim's class as `kubectl patch pvc` does.
func (k *caseEnv) setClass(claim, class string) error {
	return kubecheck.PatchClaimClass(k.ctx, k.cs, k.ns, claim, class)
}

// waitModify waits until cond holds for the claim; the error shows its modification status.
func (k *caseEnv) waitModify(claim, what string, cond func(*corev1.PersistentVolumeClaim) bool) (*corev1.PersistentVolumeClaim, error) {
	var last *corev1.PersistentVolumeClaim
	err := kubecheck.Poll(k.ctx, waitTimeout, func(ctx context.Context) (bool, error) {
		pvc, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, err
		}
		if err != nil {
			return false, nil
		}
		last = pvc
		return cond(pvc), nil
	})
	if err != nil {
		st := "never read"
		if last != nil {
			st = fmt.Sprintf("current class %q, %s, conditions %v", ptr.Deref(last.Status.CurrentVolumeAttributesClassName, ""),
				kubecheck.Modification(last), kubecheck.ConditionTypes(last))
		}
		return last, fmt.Errorf("claim %s never %s: %v (%s)", claim, what, err, st)
	}
	return last, nil
}

// checkPVClass checks that the claim's PV names class.
func (k *caseEnv) checkPVClass(claim, class string) error {
	pv, err := k.boundPV(claim)
	if err != nil {
		return err
	}
	if got := ptr.Deref(pv.Spec.VolumeAttributesClassName, ""); got != class {
		return fmt.Errorf("PV %s names class %q, want %q", pv.Name, got, class)
	}
	return nil
}

// modifyClass: a claim in use gets a VolumeAttributesClass by a claim edit; the claim's
// status and its PV name the class, and (kubevol's readOnly parameter, on this machine) the
// pod's live mount turns read-only.
func modifyClass(k *caseEnv) error {
	u, err := k.useClaim("data", classWFFC, defaultSize, "app")
	if err != nil {
		return err
	}
	class, drop, err := k.attributesClass("class", k.o.ModifyParameters)
	if err != nil {
		return err
	}
	defer drop()
	if err := k.setClass("data", class); err != nil {
		return err
	}
	if _, err := k.waitModify("data", "modified to "+class, kubecheck.ModifiedTo(class)); err != nil {
		return err
	}
	if err := k.checkPVClass("data", class); err != nil {
		return err
	}
	if u.dir == "" || k.o.ModifyParameters["readOnly"] != "true" {
		return k.deletePod("app")
	}
	// The claim has the class once the driver answered; the driver may turn the live mount
	// read-only a moment later (kubevol's split node plugin follows the controller's record
	// every second).
	var last error
	if err := kubecheck.Poll(k.ctx, waitTimeout, func(context.Context) (bool, error) {
		last = readOnlyMount(u.dir)
		return last == nil, nil
	}); err != nil {
		return fmt.Errorf("after the class %s (readOnly=true): %w", class, last)
	}
	return k.deletePod("app")
}

// readOnlyMount checks that the mount at dir refuses writes and is read-only in the mount
// table.
func readOnlyMount(dir string) error {
	probe := filepath.Join(dir, "must-fail")
	err := os.WriteFile(probe, []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		if err == nil {
			_ = os.Remove(probe)
		}
		return fmt.Errorf("writing into %s: %v, want EROFS", dir, err)
	}
	infos, err := mount.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for i := len(infos) - 1; i >= 0; i-- {
		if infos[i].MountPoint == dir {
			if !slices.Contains(infos[i].MountOptions, "ro") {
				return fmt.Errorf("the mount at %s is %v, want ro", dir, infos[i].MountOptions)
			}
			return nil
		}
	}
	return fmt.Errorf("nothing mounted at %s", dir)
}

// modifyInfeasible: a class the driver refuses (INVALID_ARGUMENT) leaves the claim
// Infeasible with the error condition, on the class it had; going back to that class rolls
// the modification back and leaves nothing of it.
func modifyInfeasible(k *caseEnv) error {
	if _, err := k.fsClaim("data", classImmediate); err != nil {
		return err
	}
	if _, err := k.boundPV("data"); err != nil {
		return err
	}
	good, dropGood, err := k.attributesClass("good", k.o.ModifyParameters)
	if err != nil {
		return err
	}
	defer dropGood()
	bad, dropBad, err := k.attributesClass("bad", k.o.InfeasibleModifyParameters)
	if err != nil {
		return err
	}
	defer dropBad()
	if err := k.setClass("data", good); err != nil {
		return err
	}
	if _, err := k.waitModify("data", "modified to "+good, kubecheck.ModifiedTo(good)); err != nil {
		return err
	}
	if err := k.setClass("data", bad); err != nil {
		return err
	}
	pvc, err := k.waitModify("data", "Infeasible", func(c *corev1.PersistentVolumeClaim) bool {
		s := c.Status.ModifyVolumeStatus
		return s != nil && s.Status == corev1.PersistentVolumeClaimModifyVolumeInfeasible && s.TargetVolumeAttributesClassName == bad
	})
	if err != nil {
		return err
	}
	if got := ptr.Deref(pvc.Status.CurrentVolumeAttributesClassName, ""); got != good {
		return fmt.Errorf("current class %q after an infeasible one, want %q", got, good)
	}
	if !slices.ContainsFunc(pvc.Status.Conditions, func(c corev1.PersistentVolumeClaimCondition) bool {
		return c.Type == corev1.PersistentVolumeClaimVolumeModifyVolumeError && strings.Contains(c.Message, "InvalidArgument")
	}) {
		return fmt.Errorf("conditions %v: want ModifyVolumeError with the driver's InvalidArgument", kubecheck.ConditionTypes(pvc))
	}
	if err := k.checkPVClass("data", good); err != nil {
		return fmt.Errorf("after an infeasible class: %w", err)
	}
	if err := k.setClass("data", good); err != nil {
		return err
	}
	if _, err := k.waitModify("data", "rolled back to "+good, kubecheck.ModifiedTo(good)); err != nil {
		return err
	}
	return k.deleteClaim("data")
}
