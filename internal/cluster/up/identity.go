package up

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/cluster/identity"
)

// tokenLifetime is the lifetime of each sidecar's token; up refreshes it at half of that
// (identity.KeepFresh), so a sidecar never holds an expired one while up runs. A restart of
// up requests new ones.
const tokenLifetime = 24 * time.Hour

// sidecarRoles are the components of deploy/ whose RBAC each sidecar process of up is bound
// to. "snapshotter" is `kubevol snapshotter` with both roles (kubevol's own driver);
// "csi-snapshotter" is its sidecar role alone (external drivers).
var sidecarRoles = map[string][]identity.Component{
	"provisioner":     {identity.Provisioner},
	"attacher":        {identity.Attacher},
	"resizer":         {identity.Resizer},
	"snapshotter":     {identity.CSISnapshotter, identity.SnapshotController},
	"csi-snapshotter": {identity.CSISnapshotter},
}

// ServiceAccountName is the ServiceAccount, in Namespace, that up runs sidecar role as.
func ServiceAccountName(role string) string { return "kubevol-up-" + role }

// sidecarKubeconfig returns the kubeconfig of role's ServiceAccount, creating the account
// (or updating it, as up finds it after a restart) with the RBAC deploy/ ships, once per
// Stack. Admin credentials stay with up.
func (s *Stack) sidecarKubeconfig(ctx context.Context, cs kubernetes.Interface, role string) (string, error) {
	s.mu.Lock()
	k := s.kubeconfigs[role]
	s.mu.Unlock()
	if k != nil {
		return k.Path, nil
	}
	comps, ok := sidecarRoles[role]
	if !ok {
		return "", fmt.Errorf("up: no RBAC for sidecar %q", role)
	}
	rules, err := identity.ShippedRules(comps...)
	if err != nil {
		return "", err
	}
	name := ServiceAccountName(role)
	a := identity.Account{Namespace: Namespace, Name: name, ClusterName: "kubevol-up:" + role, Rules: rules,
		Labels: map[string]string{"app.kubernetes.io/managed-by": fieldManager, "app.kubernetes.io/component": role}}
	if err := identity.Ensure(ctx, cs, a); err != nil {
		return "", fmt.Errorf("ServiceAccount of the %s: %w", role, err)
	}
	cluster, err := identity.ClusterOf(s.Cluster.KubeconfigPath())
	if err != nil {
		return "", err
	}
	k, err = identity.WriteKubeconfig(ctx, cs, cluster, Namespace, name, s.path("identity"), tokenLifetime)
	if err != nil {
		return "", fmt.Errorf("kubeconfig of the %s: %w", role, err)
	}
	s.mu.Lock()
	if s.kubeconfigs == nil {
		s.kubeconfigs = map[string]*identity.Kubeconfig{}
	}
	s.kubeconfigs[role] = k
	s.mu.Unlock()
	go k.KeepFresh(s.refreshCtx, func(err error) { s.report(fmt.Sprintf("%s token refresh: %v", role, err)) })
	return k.Path, nil
}
