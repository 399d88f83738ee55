// Package localcluster runs a real, single-node Kubernetes control plane on loopback: upstream
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler, linked into the
// kubevol-cluster multi-call binary. `kubevol up` and every end-to-end test use it.
//
// All state lives in one directory (certificates, etcd data, kubeconfigs, logs, ports), so a
// restarted cluster keeps its objects and its kubeconfig stays valid.
package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kubevol/kubevol/internal/cluster/proc"
)

// Component names, also the kubevol-cluster subcommands.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
)

// Controllers are the kube-controller-manager controllers the volume lifecycle needs, and
// those they depend on: namespaces and service accounts for pods, garbage collection for
// owner references, node lifecycle for node conditions.
var Controllers = []string{
	"persistentvolume-binder-controller",
	"persistentvolume-attach-detach-controller",
	"persistentvolume-expander-controller",
	"persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller",
	// The apiserver puts a finalizer on every VolumeAttributesClass; this controller lifts it
	// once no claim or volume names the class, so that a deleted class goes.
	"volumeattributesclass-protection-controller",
	"ephemeral-volume-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller",
	"node-lifecycle-controller",
	"pod-garbage-collector-controller",
	// Node client certificates: signing, the kubelet's auto-approval (nodeclient,
	// selfnodeclient), clean-up of old requests, and deletion of expired bootstrap tokens.
	"certificatesigningrequest-signing-controller",
	"certificatesigningrequest-approving-controller",
	"certificatesigningrequest-cleaner-controller",
	"token-cleaner-controller",
}

// Options configure Start.
type Options struct {
	// Dir holds all cluster state. Required.
	Dir string
	// Binary is the kubevol-cluster binary; empty means EnsureBinary.
	Binary string
	// Building, if set, is told when EnsureBinary starts building the binary (true) and
	// when the build ends (false): kubevol up's status file says so to kubevol verify.
	Building func(bool)
	// Progress receives human-readable progress (build, start). Nil discards it.
	Progress io.Writer
	// UnsafeNoFsync makes etcd skip fsync: much faster, and fine for tests whose state is
	// thrown away. Never for state a user keeps.
	UnsafeNoFsync bool
	// ReadyTimeout bounds the wait for each component; zero means two minutes.
	ReadyTimeout time.Duration
	// ExtraControllers are kube-controller-manager controllers to run beside Controllers,
	// for example the workload controllers when a real kubelet runs pods.
	ExtraControllers []string
}

// WorkloadControllers run Deployments, ReplicaSets and DaemonSets: a cluster whose node is
// a real kubelet (`kubevol up --runtime containerd`) runs deploy/'s workloads with them.
var WorkloadControllers = []string{"deployment-controller", "replicaset-controller", "daemonset-controller"}

// Ports are the loopback ports of a cluster. They are kept across restarts when still free.
type Ports struct {
	Etcd              int `json:"etcd"`
	EtcdPeer          int `json:"etcdPeer"`
	APIServer         int `json:"apiserver"`
	ControllerManager int `json:"controllerManager"`
	Scheduler         int `json:"scheduler"`
}

// Cluster is a running local control plane.
type Cluster struct {
	opts  Options
	pki   *PKI
	ports Ports

	mu    sync.Mutex
	procs []*proc.Process // in start order
}

// Start brings up etcd, kube-apiserver, kube-controller-manager and kube-scheduler and waits
// until each is healthy. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("localcluster: Options.Dir is required")
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	for _, d := range []string{dir, filepath.Join(dir, "logs"), filepath.Join(dir, "etcd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if opts.Binary == "" {
		if opts.Binary, err = ensureBinary(ctx, opts.Progress, opts.Building); err != nil {
			return nil, err
		}
	}
	// Held, whether built, found in the cache or given: the cluster restarts components from it.
	hold(opts.Binary)
	pki, err := LoadOrCreatePKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, pki: pki}

	// A port taken between our check and the component's bind is retried with fresh ports.
	for attempt := 1; ; attempt++ {
		if err := c.choosePorts(attempt > 1); err != nil {
			return nil, err
		}
		err = c.startAll(ctx)
		if err == nil {
			return c, nil
		}
		_ = c.Stop()
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
		fmt.Fprintf(opts.Progress, "port conflict, retrying with new ports: %v\n", err)
	}
}

type step struct {
	name  string
	args  []string
	ready func(context.Context) error
}

// steps are the components in start order.
func (c *Cluster) steps() []step {
	return []step{
		{Etcd, c.etcdArgs(), c.etcdReady},
		{APIServer, c.apiserverArgs(), c.httpsReady(c.ports.APIServer, "/readyz", true)},
		{ControllerManager, c.controllerManagerArgs(), c.httpsReady(c.ports.ControllerManager, "/healthz", false)},
		{Scheduler, c.schedulerArgs(), c.httpsReady(c.ports.Scheduler, "/healthz", false)},
	}
}

func (c *Cluster) startAll(ctx context.Context) error {
	start := time.Now()
	if err := c.writeKubeconfigs(); err != nil {
		return err
	}
	for _, s := range c.steps() {
		p, err := c.startStep(ctx, s)
		c.mu.Lock()
		if p != nil {
			c.procs = append(c.procs, p)
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
		fmt.Fprintf(c.opts.Progress, "%s ready (%s)\n", s.name, time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}

// startStep starts one component and waits until it is ready. The process is returned
// also when it never became ready, so that the caller stops it.
func (c *Cluster) startStep(ctx context.Context, s step) (*proc.Process, error) {
	p, err := proc.Start(s.name, c.opts.Binary, append([]string{s.name}, s.args...), c.LogPath(s.name))
	if err != nil {
		return nil, err
	}
	if err := proc.WaitReady(ctx, p, c.opts.ReadyTimeout, s.ready); err != nil {
		return p, fmt.Errorf("%s: %w; last log lines (%s):\n%s", s.name, err, p.LogPath, proc.LogTail(p.LogPath, 15))
	}
	return p, nil
}

// Restart stops the named components, the last started first, as a supervisor restarting
// them would (SIGTERM, then SIGKILL after a grace period), then starts them again in start
// order on the same ports and state, and waits until each is ready. The other components
// keep running and see their peers go away and come back. Tests use it to check that
// clients recover by themselves.
func (c *Cluster) Restart(ctx context.Context, names ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var stop []*proc.Process
	for _, p := range c.procs {
		if want[p.Name] {
			stop = append(stop, p)
			delete(want, p.Name)
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("localcluster: restart: no running component %v", names)
	}
	if err := proc.StopAll(20*time.Second, stop...); err != nil {
		return err
	}
	for _, s := range c.steps() {
		i := slices.IndexFunc(c.procs, func(p *proc.Process) bool { return p.Name == s.name })
		if i < 0 || !slices.Contains(stop, c.procs[i]) {
			continue
		}
		p, err := c.startStep(ctx, s)
		if p != nil {
			c.procs[i] = p
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Respawn starts the named component again, on the same ports and state, once its process
// has exited, and waits until it is ready. Unlike Restart it holds no lock while it waits,
// so that a supervisor can bring back several components at once, and Status keeps
// answering meanwhile. It refuses a component that still runs, or a stopped cluster.
func (c *Cluster) Respawn(ctx context.Context, name string) error {
	steps := c.steps()
	k := slices.IndexFunc(steps, func(s step) bool { return s.name == name })
	if k < 0 {
		return fmt.Errorf("localcluster: respawn: no component %q", name)
	}
	c.mu.Lock()
	i := slices.IndexFunc(c.procs, func(p *proc.Process) bool { return p.Name == name })
	if i < 0 {
		c.mu.Unlock()
		return fmt.Errorf("localcluster: respawn %s: the cluster is stopped", name)
	}
	if !c.procs[i].Exited() {
		c.mu.Unlock()
		return fmt.Errorf("localcluster: respawn %s: it is still running", name)
	}
	p, err := proc.Start(name, c.opts.Binary, append([]string{name}, steps[k].args...), c.LogPath(name))
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.procs[i] = p
	c.mu.Unlock()
	if err := proc.WaitReady(ctx, p, c.opts.ReadyTimeout, steps[k].ready); err != nil {
		return fmt.Errorf("%s: %w; last log lines (%s):\n%s", name, err, p.LogPath, proc.LogTail(p.LogPath, 15))
	}
	return nil
}

// Stop terminates the components in reverse start order and waits for each to exit.
// It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	return proc.StopAll(20*time.Second, procs...)
}

// PIDs returns the process IDs of the running components, for leak checks.
func (c *Cluster) PIDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pids []int
	for _, p := range c.procs {
		pids = append(pids, p.PID())
	}
	return pids
}

// Process is the named component's current process, or nil.
func (c *Cluster) Process(name string) *proc.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Dir is the state directory.
func (c *Cluster) Dir() string { return c.opts.Dir }

// Binary is the kubevol-cluster binary the components run from (the kubelet too).
func (c *Cluster) Binary() string { return c.opts.Binary }

// PKI is the cluster's certificate authority, for issuing component identities.
func (c *Cluster) PKI() *PKI { return c.pki }

// Ports returns the ports in use.
func (c *Cluster) Ports() Ports { return c.ports }

// Server is the apiserver URL.
func (c *Cluster) Server() string { return fmt.Sprintf("https://127.0.0.1:%d", c.ports.APIServer) }

// KubeconfigPath is the admin kubeconfig.
func (c *Cluster) KubeconfigPath() string { return filepath.Join(c.opts.Dir, "kubeconfig") }

// LogPath is the log file of a component.
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.opts.Dir, "logs", component+".log")
}

// RESTConfig is an admin client config with client-side throttling off: the tests and
// benchmarks measure kubevol, not client-go's default 5 QPS.
func (c *Cluster) RESTConfig() *rest.Config {
	cfg := c.pki.RESTConfig(c.Server(), AdminIdentity)
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// ComponentStatus is one line of `kubevol up`'s status.
type ComponentStatus struct {
	Name    string
	PID     int
	Running bool
	Healthy bool
	Detail  string
	// Restarts counts the restarts of a supervised component.
	Restarts int
}

// Status probes every component once.
func (c *Cluster) Status(ctx context.Context) []ComponentStatus {
	c.mu.Lock()
	procs := append([]*proc.Process(nil), c.procs...)
	c.mu.Unlock()
	probes := map[string]func(context.Context) error{
		Etcd:              c.etcdReady,
		APIServer:         c.httpsReady(c.ports.APIServer, "/readyz", true),
		ControllerManager: c.httpsReady(c.ports.ControllerManager, "/healthz", false),
		Scheduler:         c.httpsReady(c.ports.Scheduler, "/healthz", false),
	}
	var out []ComponentStatus
	for _, p := range procs {
		out = append(out, StatusOf(ctx, p, probes[p.Name]))
	}
	return out
}

// StatusOf reports one process: running or not, and healthy when probe passes.
func StatusOf(ctx context.Context, p *proc.Process, probe func(context.Context) error) ComponentStatus {
	s := ComponentStatus{Name: p.Name, PID: p.PID(), Running: !p.Exited()}
	if !s.Running {
		s.Detail = "exited: " + proc.ExitReason(p.Err())
	} else if err := probe(ctx); err != nil {
		s.Detail = err.Error()
	} else {
		s.Healthy = true
	}
	return s
}

// Exited returns a channel that receives the name of the first component that exits.
func (c *Cluster) Exited() <-chan string {
	c.mu.Lock()
	procs := append([]*proc.Process(nil), c.procs...)
	c.mu.Unlock()
	ch := make(chan string, len(procs))
	for _, p := range procs {
		go func() { <-p.Done(); ch <- p.Name }()
	}
	return ch
}

func (c *Cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.opts.Dir}, parts...)...)
}

func (c *Cluster) writeKubeconfigs() error {
	if err := c.pki.WriteKubeconfig(c.KubeconfigPath(), c.Server(), AdminIdentity); err != nil {
		return err
	}
	for _, id := range []Identity{controllerManagerIdentity, schedulerIdentity} {
		if err := c.pki.WriteKubeconfig(c.path(id.Name+".kubeconfig"), c.Server(), id); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) etcdArgs() []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.ports.Etcd)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.ports.EtcdPeer)
	args := []string{
		"--name=kubevol",
		"--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=kubevol=" + peer,
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	}
	if c.opts.UnsafeNoFsync {
		args = append(args, "--unsafe-no-fsync=true")
	}
	return args
}

func (c *Cluster) apiserverArgs() []string {
	p := c.pki
	return []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.ports.Etcd),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.ports.APIServer),
		"--tls-cert-file=" + p.CertFile("serving"),
		"--tls-private-key-file=" + p.KeyFile("serving"),
		"--client-ca-file=" + p.CAFile(),
		// Aggregation is unused, but a requestheader CA keeps the components' authentication
		// delegation from logging a missing bundle forever. No front-proxy-client cert is issued.
		"--requestheader-client-ca-file=" + p.CAFile(),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.ServiceAccountPublicKeyFile(),
		"--service-account-signing-key-file=" + p.ServiceAccountKeyFile(),
		"--authorization-mode=Node,RBAC",
		// Node agents bootstrap their client certificate with a token (WriteNodeBootstrapKubeconfig).
		"--enable-bootstrap-token-auth=true",
		// The default admission plugins stay on (ServiceAccount, DefaultStorageClass,
		// StorageObjectInUseProtection, ...); NodeRestriction is what a real cluster adds.
		"--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range=10.96.0.0/16",
		// No kube-proxy or endpoints here, and loopback is not a valid endpoint address.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		// A real kubelet (`kubevol up --runtime containerd`) is reached at its Node's InternalIP
		// (loopback): its host name may not resolve. The apiserver authenticates to it with
		// its own client certificate, as kubeadm sets it up.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate=" + p.CertFile(kubeletClientIdentity.Name),
		"--kubelet-client-key=" + p.KeyFile(kubeletClientIdentity.Name),
		"--profiling=false",
		"--cert-dir=" + c.path("apiserver-certs"),
	}
}

func (c *Cluster) controllerManagerArgs() []string {
	kc := c.path(controllerManagerIdentity.Name + ".kubeconfig")
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.ports.ControllerManager),
		"--tls-cert-file=" + c.pki.CertFile("serving"),
		"--tls-private-key-file=" + c.pki.KeyFile("serving"),
		"--controllers=" + strings.Join(append(slices.Clone(Controllers), c.opts.ExtraControllers...), ","),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.pki.ServiceAccountKeyFile(),
		"--root-ca-file=" + c.pki.CAFile(),
		// The cluster CA signs node client certificates, so the apiserver trusts them.
		"--cluster-signing-cert-file=" + c.pki.CAFile(),
		"--cluster-signing-key-file=" + c.pki.KeyFile("ca"),
		"--leader-elect=false",
		// The upstream defaults (20/30) throttle the PV controller in benchmarks.
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--profiling=false",
	}
}

func (c *Cluster) schedulerArgs() []string {
	kc := c.path(schedulerIdentity.Name + ".kubeconfig")
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.ports.Scheduler),
		"--tls-cert-file=" + c.pki.CertFile("serving"),
		"--tls-private-key-file=" + c.pki.KeyFile("serving"),
		"--leader-elect=false",
		"--profiling=false",
	}
}

func (c *Cluster) etcdReady(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/health", c.ports.Etcd), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("etcd /health: %s %s", resp.Status, body)
	}
	return nil
}

// httpsReady returns a probe of a component's health endpoint, verified against the
// cluster CA, optionally authenticated as admin.
func (c *Cluster) httpsReady(port int, path string, asAdmin bool) func(context.Context) error {
	return func(ctx context.Context) error {
		client, err := c.httpClient(asAdmin)
		if err != nil {
			return err
		}
		url := fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s %s", path, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
}

func (c *Cluster) httpClient(asAdmin bool) (*http.Client, error) {
	pool := x509.NewCertPool()
	pool.AddCert(c.pki.CACert)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if asAdmin {
		cert, err := tls.LoadX509KeyPair(c.pki.CertFile(AdminIdentity.Name), c.pki.KeyFile(AdminIdentity.Name))
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}, Timeout: 5 * time.Second}, nil
}

// choosePorts reuses the ports of the last run when they are all free, so an existing
// kubeconfig keeps working, and otherwise picks fresh ones.
func (c *Cluster) choosePorts(fresh bool) error {
	file := c.path("ports.json")
	if !fresh {
		var saved Ports
		if data, err := os.ReadFile(file); err == nil && json.Unmarshal(data, &saved) == nil {
			if allFree(saved.Etcd, saved.EtcdPeer, saved.APIServer, saved.ControllerManager, saved.Scheduler) {
				c.ports = saved
				return nil
			}
		}
	}
	free, err := FreePorts(5)
	if err != nil {
		return err
	}
	c.ports = Ports{Etcd: free[0], EtcdPeer: free[1], APIServer: free[2], ControllerManager: free[3], Scheduler: free[4]}
	data, _ := json.MarshalIndent(c.ports, "", "  ")
	return writeFileAtomic(file, data, 0o644)
}

func allFree(ports ...int) bool {
	for _, p := range ports {
		if p == 0 {
			return false
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}
