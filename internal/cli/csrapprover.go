package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/csrapprover"
)

type csrApproverOptions struct {
	kubeconfig      string
	serviceAccounts []string
	nodeSuffix      string
	workers         int
	httpEndpoint    string
}

func newCSRApproverCommand() *cobra.Command {
	o := &csrApproverOptions{}
	cmd := &cobra.Command{
		Use:   "csr-approver",
		Short: "approves node agents' client certificates, each for its own node only",
		Long: `csr-approver answers the CertificateSigningRequests (signer kubernetes.io/kube-apiserver-client-kubelet)
that kubevol node agents running as a DaemonSet file with their pod's service-account token
(kubevol node --bootstrap-kubeconfig=in-cluster). The API server records in each request the
node that the token's pod is bound to; a request from such a pod on node N is approved only
for system:node:N<--node-suffix> with group system:nodes, no alternative names and the kubelet's
client usages, and denied otherwise, with the reason in the CSR's condition, an event and the
log. Requests by anyone else are left to other approvers. Renewals, which a node files as
itself, are left to kube-controller-manager's selfnodeclient approval.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster configuration")
	f.StringSliceVar(&o.serviceAccounts, "service-account", []string{"kubevol-system:kubevol-node"}, "<namespace>:<name> of the node agents' service account (repeatable)")
	f.StringVar(&o.nodeSuffix, "node-suffix", "-kubevol", "what follows the pod's node name in the node name an agent may request (the DaemonSet's --node-name=$(NODE_NAME)-kubevol)")
	f.IntVar(&o.workers, "workers", 2, "requests answered in parallel")
	f.StringVar(&o.httpEndpoint, "http-endpoint", "", "address of /metrics and /healthz; empty disables them")
	return cmd
}

func (o *csrApproverOptions) validate() error {
	if len(o.serviceAccounts) == 0 {
		return usageErrorf("--service-account: at least one is required")
	}
	for _, sa := range o.serviceAccounts {
		ns, name, ok := strings.Cut(sa, ":")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return usageErrorf("--service-account %q: want <namespace>:<name>", sa)
		}
	}
	// A suffix turns a node name into another valid one; empty grants the kubelet's own name.
	if o.nodeSuffix != "" && len(validation.IsDNS1123Subdomain("n"+o.nodeSuffix)) > 0 {
		return usageErrorf("--node-suffix %q does not make a valid node name", o.nodeSuffix)
	}
	if o.workers < 1 {
		return usageErrorf("--workers must be at least 1, got %d", o.workers)
	}
	return nil
}

func (o *csrApproverOptions) run(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "kubevol-csr-approver"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var requesters []string
	for _, sa := range o.serviceAccounts {
		ns, name, _ := strings.Cut(sa, ":")
		requesters = append(requesters, "system:serviceaccount:"+ns+":"+name)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c, err := csrapprover.New(csrapprover.Config{Client: client, Workers: o.workers, Registerer: reg,
		Rules: csrapprover.Rules{Requesters: requesters, NodeSuffix: o.nodeSuffix}})
	if err != nil {
		return err
	}
	if o.httpEndpoint != "" {
		l, err := net.Listen("tcp", o.httpEndpoint)
		if err != nil {
			return fmt.Errorf("--http-endpoint: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
		klog.FromContext(ctx).V(2).Info("Serving /metrics and /healthz", "address", l.Addr().String())
	}
	return c.Run(ctx)
}
