package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
)

// Role is one controller of a process that runs several, each under its own Lease (the
// snapshotter runs the snapshot-controller and the csi-snapshotter, which upstream ship as
// two binaries with two Leases).
type Role struct {
	Lease string
	Run   func(context.Context) error
}

// RunRoles is Run for several roles: one HTTP server, and each role elected on its own
// Lease when leader election is on. The first role to end (or lose its Lease) ends all.
func RunRoles(ctx context.Context, o Options, client kubernetes.Interface, reg *prometheus.Registry, roles ...Role) error {
	if len(roles) == 1 {
		return Run(ctx, o, client, reg, roles[0].Lease, roles[0].Run)
	}
	watchdogs := make(allHealthy, len(roles))
	for i := range roles {
		watchdogs[i] = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	}
	if o.HTTPEndpoint != "" {
		stop, err := serveHTTP(ctx, o.HTTPEndpoint, o.MetricsPath, reg, watchdogs)
		if err != nil {
			return fmt.Errorf("--http-endpoint %s: %w", o.HTTPEndpoint, err)
		}
		defer stop()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(roles))
	var wg sync.WaitGroup
	for i, r := range roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if o.LeaderElection.Enabled {
				err = runElected(ctx, o.LeaderElection, client, r.Lease, watchdogs[i], r.Run)
			} else {
				err = r.Run(ctx)
			}
			errs <- err
			cancel()
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if ctx.Err() != nil && errors.Join(all...) == nil {
		return nil
	}
	return errors.Join(all...)
}

// allHealthy fails when any Lease is overdue.
type allHealthy []*leaderelection.HealthzAdaptor

func (a allHealthy) Check(r *http.Request) error {
	for _, w := range a {
		if err := w.Check(r); err != nil {
			return err
		}
	}
	return nil
}
