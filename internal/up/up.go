// Package up runs the whole kubevol stack on this machine: the local control plane
// (internal/localcluster), then the kubevol components as child processes of the kubevol
// binary itself, and the cluster objects they need (namespace, CSIDriver, default
// StorageClass). `kubevol up` is its command line.
package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/driver"
	"github.com/kubevol/kubevol/internal/localcluster"
	"github.com/kubevol/kubevol/internal/proc"
)

// Options configure Start.
type Options struct {
	// Dir holds all state: the cluster's, the driver's volumes, the node's pod directories.
	Dir string
	// ClusterBinary is the kubevol-cluster binary; empty builds or finds it.
	ClusterBinary string
	// KubevolBinary runs the components; empty means this executable.
	KubevolBinary string
	// NodeName is the node the agent registers and the driver serves.
	NodeName string
	// Progress receives human-readable progress.
	Progress io.Writer
	// CallLog, if set, makes the driver log every CSI call there (benchmarks, tests).
	CallLog string
	// UnsafeNoFsync runs etcd without fsync: for throwaway benchmark clusters only.
	UnsafeNoFsync bool
	// AttachRequired runs the driver with --attach-required and installs its CSIDriver with
	// attachRequired: true, so volumes go through VolumeAttachments and the attacher.
	AttachRequired bool
}

// Namespace is where the kubevol components keep their namespaced objects (leases, the
// provisioner's intent journal).
const Namespace = "kubevol-system"

// Stack is a running control plane plus kubevol.
type Stack struct {
	opts    Options
	Cluster *localcluster.Cluster

	mu    sync.Mutex
	procs []*component
}

type component struct {
	p      *proc.Process
	health string // URL of /healthz, or "" for none
}

// Start brings everything up; on error nothing is left running.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.KubevolBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.KubevolBinary = exe
	}
	if o.NodeName == "" {
		return nil, errors.New("up: NodeName is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	if marked, err := claimDir(o.Dir); err != nil {
		return nil, fmt.Errorf("up: state directory: %w", err)
	} else if !marked {
		fmt.Fprintf(o.Progress, "note: %s is not empty and has no %s marker, so `kubevol up --reset` will refuse to wipe it\n", o.Dir, MarkerFile)
	}
	cluster, err := localcluster.Start(ctx, localcluster.Options{Dir: o.Dir, Binary: o.ClusterBinary, Progress: o.Progress, UnsafeNoFsync: o.UnsafeNoFsync})
	if err != nil {
		return nil, err
	}
	s := &Stack{opts: o, Cluster: cluster}
	if err := s.startComponents(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Stack) path(elem ...string) string {
	return filepath.Join(append([]string{s.opts.Dir}, elem...)...)
}

func (s *Stack) startComponents(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(s.Cluster.RESTConfig())
	if err != nil {
		return err
	}
	if err := installObjects(ctx, cs, s.opts.AttachRequired); err != nil {
		return fmt.Errorf("install kubevol objects: %w", err)
	}
	if err := installSnapshotObjects(ctx, s.Cluster.RESTConfig()); err != nil {
		return fmt.Errorf("install snapshot CRDs and class: %w", err)
	}
	for _, d := range []string{s.path("csi"), s.path("driver"), s.path("node")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	ports, err := localcluster.FreePorts(6)
	if err != nil {
		return err
	}
	kubeconfig := s.Cluster.KubeconfigPath()
	socket := "unix://" + s.path("csi", "csi.sock")
	steps := []struct {
		name string
		port int
		args []string
	}{
		{"driver", ports[0], []string{"driver", "--endpoint", socket, "--node-id", s.opts.NodeName, "--state-dir", s.path("driver"), "--mode", "all",
			// The node agent learns of the driver as the kubelet would, through its registry.
			"--plugin-registration-dir", s.path("node", "plugins_registry")}},
		{"provisioner", ports[1], []string{"provisioner", "--csi-address", socket, "--kubeconfig", kubeconfig, "--leader-election-namespace", Namespace, "--intent-namespace", Namespace}},
		{"attacher", ports[2], []string{"attacher", "--csi-address", socket, "--kubeconfig", kubeconfig, "--leader-election-namespace", Namespace}},
		{"resizer", ports[3], []string{"resizer", "--csi-address", socket, "--kubeconfig", kubeconfig, "--leader-election-namespace", Namespace}},
		{"snapshotter", ports[5], []string{"snapshotter", "--csi-address", socket, "--kubeconfig", kubeconfig, "--leader-election-namespace", Namespace}},
		{"node", ports[4], []string{"node", "--kubeconfig", kubeconfig, "--node-name", s.opts.NodeName, "--root-dir", s.path("node")}},
	}
	if s.opts.CallLog != "" {
		steps[0].args = append(steps[0].args, "--call-log", s.opts.CallLog)
	}
	if s.opts.AttachRequired {
		steps[0].args = append(steps[0].args, "--attach-required")
	}
	for _, st := range steps {
		addr := "127.0.0.1:" + strconv.Itoa(st.port)
		flag := "--http-endpoint"
		if st.name == "node" {
			flag = "--metrics-address"
		}
		args := append(st.args, flag, addr)
		p, err := proc.Start(st.name, s.opts.KubevolBinary, args, s.Cluster.LogPath("kubevol-"+st.name))
		if err != nil {
			return err
		}
		c := &component{p: p, health: "http://" + addr + "/healthz"}
		s.mu.Lock()
		s.procs = append(s.procs, c)
		s.mu.Unlock()
		if err := proc.WaitReady(ctx, p, time.Minute, c.probe); err != nil {
			return fmt.Errorf("kubevol %s: %w; last log lines (%s):\n%s", st.name, err, p.LogPath, proc.LogTail(p.LogPath, 15))
		}
		fmt.Fprintf(s.opts.Progress, "kubevol %s ready\n", st.name)
	}
	return nil
}

// Stop stops the kubevol components, then the control plane.
func (s *Stack) Stop() error {
	s.mu.Lock()
	var procs []*proc.Process
	for _, c := range s.procs {
		procs = append(procs, c.p)
	}
	s.procs = nil
	s.mu.Unlock()
	return errors.Join(proc.StopAll(30*time.Second, procs...), s.Cluster.Stop())
}

// Status is the control plane's status followed by the components'.
func (s *Stack) Status(ctx context.Context) []localcluster.ComponentStatus {
	out := s.Cluster.Status(ctx)
	s.mu.Lock()
	procs := append([]*component(nil), s.procs...)
	s.mu.Unlock()
	for _, c := range procs {
		out = append(out, localcluster.StatusOf(ctx, c.p, c.probe))
	}
	return out
}

// Exited receives the name of the first component, of the cluster or of kubevol, to exit.
func (s *Stack) Exited() <-chan string {
	ch := make(chan string, 16)
	go func() { ch <- <-s.Cluster.Exited() }()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.procs {
		go func() { <-c.p.Done(); ch <- "kubevol " + c.p.Name }()
	}
	return ch
}

// LogPath is the log file of a component (cluster component names, or "kubevol <name>").
func (s *Stack) LogPath(name string) string {
	if n, ok := strings.CutPrefix(name, "kubevol "); ok {
		return s.Cluster.LogPath("kubevol-" + n)
	}
	return s.Cluster.LogPath(name)
}

// DriverName is the CSI driver `kubevol up` runs.
const DriverName = driver.DefaultDriverName
