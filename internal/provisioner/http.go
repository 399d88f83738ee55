package provisioner

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
)

type health struct {
	leader *leaderelection.HealthzAdaptor
}

func newHealth() *health {
	// The lease may be 20 s overdue before the check fails, as csi-lib-utils allows.
	return &health{leader: leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)}
}

// serveHTTP serves metrics, /healthz and /healthz/leader-election on addr.
func serveHTTP(ctx context.Context, addr, metricsPath string, reg *prometheus.Registry, h *health) (func(), error) {
	mux := http.NewServeMux()
	mux.Handle(metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/healthz/leader-election", func(w http.ResponseWriter, r *http.Request) {
		if err := h.leader.Check(r); err != nil {
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
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server failed", "address", addr)
		}
	}()
	klog.FromContext(ctx).Info("Serving metrics and health", "address", l.Addr().String(), "metricsPath", metricsPath)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

func metaWithLabels(name, ns string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}
}
