package provisioner

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// runWithLeaderElection runs lead while this process holds the Lease named after the
// driver, as csi-lib-utils does. Losing the lease ends the process with an error: the
// controllers' caches and the intent journal must not outlive the leadership.
func runWithLeaderElection(ctx context.Context, le LeaderElection, client kubernetes.Interface, lockName, hostname string, h *health, lead func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	ns := LeaseNamespace(le.Namespace)
	id := hostname + "_" + fmt.Sprint(time.Now().UnixNano())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metaWithLabels(lockName, ns, le.Labels),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		Labels:     le.Labels,
	}
	errCh := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        h.leader,
		Name:            lockName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Became the leader", "lease", klogRef(ns, lockName), "identity", id)
				errCh <- lead(ctx)
			},
			OnStoppedLeading: func() {
				select {
				case errCh <- errLostLease:
				default:
				}
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					logger.Info("Another instance leads", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	go elector.Run(ctx)
	select {
	case err := <-errCh:
		if ctx.Err() != nil {
			return nil
		}
		return err
	case <-ctx.Done():
		return nil
	}
}

// LeaseNamespace resolves the lease namespace as upstream: the flag, POD_NAMESPACE, the
// service account's namespace, then "default".
func LeaseNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
		return string(b)
	}
	return "default"
}

func klogRef(ns, name string) klog.ObjectRef { return klog.KRef(ns, name) }
