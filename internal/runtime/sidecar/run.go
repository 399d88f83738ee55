package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// errLostLease ends a sidecar that lost its Lease: its caches and in-flight work must not
// outlive the leadership, so it exits and restarts as a candidate, as upstream does.
var errLostLease = errors.New("leader election lost")

// Run serves metrics and health on o.HTTPEndpoint (when set) and runs lead, under leader
// election when enabled. lockName names the Lease (upstream: derived from the driver name).
// It returns when ctx ends, lead returns, or the Lease is lost.
func Run(ctx context.Context, o Options, client kubernetes.Interface, reg *prometheus.Registry, lockName string, lead func(context.Context) error) error {
	// The lease may be 20 s overdue before the health check fails, as csi-lib-utils allows.
	watchdog := leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	if o.HTTPEndpoint != "" {
		stop, err := serveHTTP(ctx, o.HTTPEndpoint, o.MetricsPath, reg, watchdog)
		if err != nil {
			return fmt.Errorf("HTTP endpoint %s: %w", o.HTTPEndpoint, err)
		}
		defer stop()
	}
	if !o.LeaderElection.Enabled {
		return lead(ctx)
	}
	return runElected(ctx, o.LeaderElection, client, lockName, watchdog, lead)
}

func runElected(ctx context.Context, le LeaderElection, client kubernetes.Interface, lockName string, watchdog *leaderelection.HealthzAdaptor, lead func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	ns := LeaseNamespace(le.Namespace)
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s_%d", host, time.Now().UnixNano())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: lockName, Namespace: ns, Labels: le.Labels},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		Labels:     le.Labels,
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	result := make(chan error, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		WatchDog:        watchdog,
		Name:            lockName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Became the leader", "lease", klog.KRef(ns, lockName), "identity", id)
				result <- lead(ctx)
			},
			OnStoppedLeading: func() {
				select {
				case result <- errLostLease:
				default:
				}
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					logger.Info("Another replica leads", "lease", klog.KRef(ns, lockName), "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	go elector.Run(ctx)
	select {
	case err := <-result:
		if ctx.Err() != nil {
			return nil
		}
		return err
	case <-ctx.Done():
		return nil
	}
}

// healthChecker is a leader election watchdog (one Lease, or several).
type healthChecker interface{ Check(*http.Request) error }

// serveHTTP serves metrics, /healthz and /healthz/leader-election, as the upstream sidecars'
// --http-endpoint does.
func serveHTTP(ctx context.Context, addr, metricsPath string, reg *prometheus.Registry, watchdog healthChecker) (func(), error) {
	mux := http.NewServeMux()
	mux.Handle(metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/healthz/leader-election", func(w http.ResponseWriter, r *http.Request) {
		if err := watchdog.Check(r); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	logger := klog.FromContext(ctx)
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP server failed", "address", addr)
		}
	}()
	logger.Info("Serving metrics and health", "address", l.Addr().String(), "metricsPath", metricsPath)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
