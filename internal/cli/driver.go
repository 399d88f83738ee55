package cli

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/driver"
	"github.com/kubevol/kubevol/internal/runtime/sizes"
	"github.com/kubevol/kubevol/internal/runtime/version"
	"github.com/kubevol/kubevol/pkg/pluginregistration"
)

type driverOptions struct {
	cfg          driver.Config
	endpoint     string
	extra        []string
	mode         string
	capacity     string
	httpEndpoint string
	faults       []string
	regDir       string
	regPath      string
}

func newDriverCommand() *cobra.Command {
	o := driverOptions{}
	cmd := &cobra.Command{
		Use:   "driver",
		Short: "local-storage CSI driver backed by directories and loop devices",
		Long: `driver serves the CSI Identity, Controller and Node services on a unix socket. Volumes
are directories (StorageClass parameter type=dir, the default) or sparse images attached as
loop devices (type=block) under --state-dir. --mode splits the services as a cluster deploys
them: a controller process and a node process of one node share --state-dir.

Fault injection (off by default): --fault or $` + driver.FaultsEnv + `, rules separated by ";",
each METHOD:key=value,... with error=CODE, rate=0..1, count=N, delay=DURATION, hang, lose
(the call takes effect, then its reply is lost: held until the client's deadline, or error=CODE).
Example: CreateVolume:error=UNAVAILABLE,rate=0.5;NodeStageVolume:delay=2s;DeleteVolume:lose,rate=0.2`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.regDir, "plugin-registration-dir", "", "node or all mode: serve the kubelet plugin registration socket <dir>/<drivername>-reg.sock here, as node-driver-registrar does (e.g. /var/lib/kubelet/plugins_registry)")
	f.StringVar(&o.regPath, "kubelet-registration-path", "", "CSI socket path announced at registration, as the node agent sees it (default: the --endpoint path)")
	f.StringVar(&o.endpoint, "endpoint", os.Getenv("CSI_ENDPOINT"), "CSI endpoint, unix:///path/csi.sock (default $CSI_ENDPOINT)")
	f.StringArrayVar(&o.extra, "extra-endpoint", nil, "further unix:// sockets serving the same services (repeatable): give each caller its own, and the call log's endpoint field tells the callers apart")
	f.StringVar(&o.cfg.NodeID, "node-id", "", "name of this node, also its topology segment "+driver.TopologyKey+" (required)")
	f.StringVar(&o.cfg.StateDir, "state-dir", "", "directory of the records, volumes and snapshots (required)")
	f.StringVar(&o.mode, "mode", string(driver.ModeAll), "services to serve: controller, node or all")
	f.StringSliceVar(&o.cfg.TopologyNodes, "topology-nodes", nil, "controller or all mode: further node IDs whose topology segments the controller provisions on, for several node instances over one controller on one machine (each volume stays local to its node)")
	f.StringVar(&o.cfg.ControllerStateDir, "controller-state-dir", "", "node mode: the controller's --state-dir when this node instance has its own (see --topology-nodes; default: --state-dir)")
	f.StringVar(&o.cfg.DriverName, "drivername", driver.DefaultDriverName, "CSI driver name")
	f.StringToStringVar(&o.cfg.Zone, "zone", nil, "further topology segments KEY=VALUE,... the node reports and every local volume is accessible from, beside "+driver.TopologyKey+": a zone in a CSI migration target's shape (topology.ebs.csi.aws.com/zone=us-east-1a), see docs/migration.md")
	f.BoolVar(&o.cfg.AttachRequired, "attach-required", false, "advertise PUBLISH_UNPUBLISH_VOLUME, so that the CO attaches volumes")
	f.StringSliceVar(&o.cfg.Without, "without", nil, "capabilities to switch off, comma-separated, to test a CO against drivers that lack them: "+strings.Join(driver.WithoutNames, ", ")+" (see docs/driver.md)")
	f.Int64Var(&o.cfg.MaxVolumesPerNode, "max-volumes-per-node", 0, "volumes a node may have published, reported by NodeGetInfo (0: no limit)")
	f.StringVar(&o.cfg.MaxVolumesPerNodeFile, "max-volumes-per-node-file", "", "file holding the count NodeGetInfo reports, read at every call (tests of the mutable CSINode allocatable count; default: --max-volumes-per-node)")
	f.StringVar(&o.capacity, "capacity", "100Gi", "size of the pool of dir volumes, a quantity such as 100Gi")
	f.StringVar(&o.cfg.CallLog, "call-log", "", "append one JSON line per CSI call to this file")
	f.StringVar(&o.httpEndpoint, "http-endpoint", "", "address such as 127.0.0.1:9808 to serve /metrics and /healthz on (default: off)")
	f.StringArrayVar(&o.faults, "fault", nil, "fault injection rules (repeatable), see above")
	f.StringVar((*string)(&o.cfg.Recover), "recover", "", "only after the driver refused a state directory: adopt (trust the records found as this driver's) or quarantine (set them aside and move all data to <state-dir>/quarantine); nothing is deleted either way")
	return cmd
}

func (o *driverOptions) validate() error {
	if o.endpoint == "" {
		return usageErrorf("--endpoint is required (or set $CSI_ENDPOINT)")
	}
	if _, err := driver.ParseEndpoint(o.endpoint); err != nil {
		return usageErrorf("--endpoint: %v", err)
	}
	for _, ep := range o.extra {
		if _, err := driver.ParseEndpoint(ep); err != nil {
			return usageErrorf("--extra-endpoint: %v", err)
		}
	}
	q, err := sizes.Parse(o.capacity)
	if err == nil {
		o.cfg.Capacity, err = sizes.Bytes("--capacity", q)
	}
	if err != nil {
		return usageErrorf("--capacity %q: want a positive quantity such as 100Gi, below 8Ei", o.capacity)
	}
	o.cfg.Mode = driver.Mode(o.mode)
	if o.httpEndpoint != "" {
		if _, _, err := net.SplitHostPort(o.httpEndpoint); err != nil {
			return usageErrorf("--http-endpoint %q: want host:port", o.httpEndpoint)
		}
	}
	specs := o.faults
	if env := os.Getenv(driver.FaultsEnv); env != "" {
		specs = append(specs, env)
	}
	for _, s := range specs {
		rules, err := driver.ParseFaults(s)
		if err != nil {
			return usageErrorf("--fault: %v", err)
		}
		o.cfg.Faults = append(o.cfg.Faults, rules...)
	}
	if o.regDir != "" && o.mode == string(driver.ModeController) {
		return usageErrorf("--plugin-registration-dir registers the node service; it needs --mode node or all")
	}
	if o.regPath == "" {
		o.regPath, _ = driver.ParseEndpoint(o.endpoint)
	}
	o.cfg.Version = version.Get()
	if err := o.cfg.Validate(); err != nil {
		return usageErrorf("%v", err)
	}
	return nil
}

func (o *driverOptions) run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	o.cfg.Logger = logger
	d, err := driver.New(o.cfg)
	if err != nil {
		return err
	}
	lis, err := driver.Listen(o.endpoint)
	if err != nil {
		return err
	}
	var extra []net.Listener
	closeAll := func() {
		for _, l := range append(extra, lis) {
			_ = l.Close()
		}
	}
	for _, ep := range o.extra {
		l, err := driver.Listen(ep)
		if err != nil {
			closeAll()
			return err
		}
		extra = append(extra, l)
	}
	if o.httpEndpoint != "" {
		hl, err := net.Listen("tcp", o.httpEndpoint)
		if err != nil {
			closeAll()
			return err
		}
		srv := &http.Server{Handler: d.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "HTTP endpoint failed")
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		logger.Info("Serving /metrics and /healthz", "address", hl.Addr().String())
	}
	if o.regDir != "" {
		// Registration starts with serving: the node agent may call the driver at once.
		regCtx, cancel := context.WithCancel(ctx)
		reg := &pluginregistration.Registrar{Dir: o.regDir, Driver: o.cfg.DriverName, Endpoint: o.regPath}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := reg.Serve(regCtx); err != nil {
				logger.Error(err, "Plugin registration stopped")
			}
		}()
		// The socket goes before the process does, so the node agent deregisters the driver.
		defer func() { cancel(); <-done }()
	}
	return d.Run(ctx, lis, extra...)
}
