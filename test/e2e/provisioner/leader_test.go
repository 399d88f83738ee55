package provisioner_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevol/kubevol/internal/runtime/csiclient"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// Two replicas elect one leader through a Lease; when the leader is killed, the standby
// takes over and provisions.
func TestLeaderElectionFailover(t *testing.T) {
	t.Parallel()
	le := []string{"--leader-election", "--leader-election-namespace", "", "--leader-election-lease-duration", "4s",
		"--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "1s"}
	e := newEnv(t, envOptions{noProv: true})
	le[2] = e.ns
	e.provArgs = append(e.provArgs, le...)
	e.startProvisioner()
	lease := csiclient.SanitizeDriverName(e.driver)
	holder, err := framework.WaitLeaseHolder(e.ctx, e.cs, e.ns, lease, "")
	fatalIf(t, err, "no leader")
	standbyArgs := append([]string{}, e.provArgs...)
	for i, a := range standbyArgs {
		if a == e.http {
			standbyArgs[i] = freeAddr(t)
		}
	}
	standby := framework.StartKubevol(t, standbyArgs...)

	sc := e.class(nil)
	e.createClaim(claimSpec("before", sc.Name, "8Mi", nil))
	e.waitBound("before", time.Minute)

	e.prov.Kill()
	e.createClaim(claimSpec("after", sc.Name, "8Mi", nil))
	e.waitBound("after", time.Minute)
	l, err := e.cs.CoordinationV1().Leases(e.ns).Get(e.ctx, lease, metav1.GetOptions{})
	fatalIf(t, err, "lease")
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == holder {
		t.Errorf("lease still held by the killed leader %s", holder)
	}
	if standby.Exited() {
		t.Error("the standby exited")
	}
}
