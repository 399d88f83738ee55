package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// DefaultBlockParameters are the extra StorageClass parameters of the raw block and
// filesystem expansion cases for kubevol's own driver (any driver named *.kubevol.io): its
// default "dir" volumes are directories, which have neither a device nor a filesystem of
// their own. Other drivers get none unless --block-parameters says otherwise.
var DefaultBlockParameters = map[string]string{"type": "block"}

// DefaultMountOptions are the mount options of the pv/fields case for kubevol's own driver,
// which passes a class's mountOptions to its mounts.
var DefaultMountOptions = []string{"noatime"}

// fsTypeParameter is the StorageClass parameter the provisioner passes as the capability's
// fs_type.
const fsTypeParameter = "csi.storage.k8s.io/fstype"

// env is what every case shares: clients, the driver and what it can do, the node and, on a
// kubevol up of this machine, the node agent's root directory.
type env struct {
	o         Options
	cs        kubernetes.Interface
	dyn       dynamic.Interface
	driver    string
	csiDriver *storagev1.CSIDriver
	base      *storagev1.StorageClass // nil: the driver has no StorageClass; verify makes its own
	node      string
	// topology is the node's segment of the driver's topology keys.
	topology map[string]string
	// root is the node agent's --root-dir on this machine, "" elsewhere; kubelet says that
	// the process serving it is a real kubelet.
	root    string
	kubelet bool
	// conn is a connection to the driver's socket when this host has it.
	conn *csiclient.Conn
	caps capabilities
	// runID names what this run creates.
	runID   string
	classes map[string]string // variant → StorageClass name
	// volumesBefore are the driver's volumes before the run (ListVolumes), or nil.
	volumesBefore map[string]bool
	// snapshotClasses are the run's VolumeSnapshotClasses by deletion policy.
	snapshotClasses map[string]string

	// mu guards uids, the pods of the run, whose mounts must all be gone at the end.
	mu   sync.Mutex
	uids []types.UID
}

// capabilities are what the driver advertises; known is false when its socket is not
// reachable from here, and then every case runs.
type capabilities struct {
	known       bool
	controller  map[csi.ControllerServiceCapability_RPC_Type]bool
	node        map[csi.NodeServiceCapability_RPC_Type]bool
	online      bool
	offline     bool
	endpoint    string
	pluginError string
}

func newEnv(ctx context.Context, o Options) (*env, error) {
	if (o.Driver == "") == (o.StorageClass == "") {
		return nil, errors.New("give exactly one of a driver or a StorageClass")
	}
	kubeconfig := o.Kubeconfig
	e := &env{o: o, runID: rand.String(5), classes: map[string]string{}}
	if kubeconfig == "" {
		kubeconfig = filepath.Join(o.Dir, "kubeconfig")
	}
	// `kubevol up &` followed by `kubevol verify` is the usual CI script: wait for up to
	// write its kubeconfig and for the API to answer.
	var cfg *rest.Config
	var lastErr error
	upw := newUpWait(o, time.Now())
	err := pollUp(ctx, upw, func(ctx context.Context) (bool, error) {
		if cfg, lastErr = clientcmd.BuildConfigFromFlags("", kubeconfig); lastErr != nil {
			return false, nil
		}
		cfg.QPS, cfg.Burst = 100, 200
		if e.cs, lastErr = kubernetes.NewForConfig(cfg); lastErr != nil {
			return false, lastErr
		}
		_, lastErr = e.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return lastErr == nil, nil
	})
	if err != nil {
		hint := "is kubevol up running with this --dir?"
		if o.Kubeconfig != "" {
			hint = "is the cluster of --kubeconfig up, and its server reachable from here?"
		}
		return nil, fmt.Errorf("no ready cluster behind %s within %s: %v (%s)%s", kubeconfig, o.Wait, lastErr, hint, upw.why())
	}
	if e.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if o.StorageClass != "" {
		upw.restart(time.Now())
		sc, err := waitFor(ctx, upw, func(ctx context.Context) (*storagev1.StorageClass, error) {
			return e.cs.StorageV1().StorageClasses().Get(ctx, o.StorageClass, metav1.GetOptions{})
		})
		if err != nil {
			return nil, fmt.Errorf("StorageClass %s (waited %s): %w", o.StorageClass, o.Wait, err)
		}
		e.base, e.driver = sc, sc.Provisioner
	} else {
		e.driver = o.Driver
	}
	// kubevol up creates an external driver's CSIDriver and StorageClass only once the
	// node agent registered it, seconds after the API is ready: wait for them too.
	upw.restart(time.Now())
	if e.csiDriver, err = waitCSIDriver(ctx, e.cs, e.driver, upw); err != nil {
		return nil, err
	}
	if err := e.findNode(ctx); err != nil {
		return nil, err
	}
	// Only now: a kubevol up started just before creates its node directory after the API
	// is ready, and the driver's registration proves its node agent has run.
	switch {
	case o.NodeRootDir != "":
		if st, err := os.Stat(filepath.Join(o.NodeRootDir, "pods")); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--node-root-dir %s has no pods directory: not the root directory of a kubelet or node agent", o.NodeRootDir)
		}
		e.root = o.NodeRootDir
	case o.Kubeconfig == "":
		// The node agent's, or the real kubelet's of kubevol up --runtime containerd: both
		// keep the kubelet's layout (pods/, plugins/, plugins_registry/) under their root.
		for _, d := range []string{filepath.Join(o.Dir, "node"), filepath.Join(o.Dir, "runtime", "kubelet")} {
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				e.root = d
				break
			}
		}
	}
	if e.root != "" {
		_, e.kubelet, _ = nodeProcess(e.root)
	}
	if o.StorageClass == "" {
		if e.base, err = e.defaultClass(ctx); err != nil {
			return nil, err
		}
	}
	e.askDriver(ctx)
	if e.o.BlockParameters == nil && strings.HasSuffix(e.driver, ".kubevol.io") {
		e.o.BlockParameters = DefaultBlockParameters
	}
	e.defaultModifyParameters()
	if e.o.MountOptions == nil && e.base != nil {
		e.o.MountOptions = e.base.MountOptions
	}
	if e.o.MountOptions == nil && strings.HasSuffix(e.driver, ".kubevol.io") {
		e.o.MountOptions = DefaultMountOptions
	}
	if err := e.createClasses(ctx); err != nil {
		_ = e.removeClasses()
		return nil, err
	}
	if e.caps.controller[csi.ControllerServiceCapability_RPC_LIST_VOLUMES] {
		if e.volumesBefore, err = e.listVolumes(ctx); err != nil {
			return nil, fmt.Errorf("ListVolumes: %w", err)
		}
	}
	return e, nil
}

// waitCSIDriver waits, as long as w allows, for the CSIDriver object of driver; the error
// of a driver that never appears names the drivers there are, as the likely fix is a typo.
func waitCSIDriver(ctx context.Context, cs kubernetes.Interface, driver string, w *upWait) (*storagev1.CSIDriver, error) {
	got, lastErr := waitFor(ctx, w, func(ctx context.Context) (*storagev1.CSIDriver, error) {
		return cs.StorageV1().CSIDrivers().Get(ctx, driver, metav1.GetOptions{})
	})
	if lastErr == nil {
		return got, nil
	}
	if !apierrors.IsNotFound(lastErr) {
		return nil, fmt.Errorf("CSIDriver %s: %w", driver, lastErr)
	}
	var names []string
	if list, err := cs.StorageV1().CSIDrivers().List(context.WithoutCancel(ctx), metav1.ListOptions{}); err == nil {
		for _, d := range list.Items {
			names = append(names, d.Name)
		}
	}
	return nil, fmt.Errorf("no CSIDriver %s within %s (the cluster has: %s); is it a kubevol up --driver, or does it install its own?%s", driver, w.wait, strings.Join(names, ", "), w.why())
}

// waitFor gets an object until it exists or w's wait is over (kubevol up creates an
// external driver's objects seconds after its API is ready); the error is the last get's.
func waitFor[T any](ctx context.Context, w *upWait, get func(context.Context) (T, error)) (T, error) {
	var got T
	var lastErr error
	err := pollUp(ctx, w, func(ctx context.Context) (bool, error) {
		got, lastErr = get(ctx)
		return lastErr == nil, nil
	})
	if err != nil && lastErr == nil {
		lastErr = err
	}
	return got, lastErr
}

// defaultClass is the driver's StorageClass: the default class if it is the driver's, else
// the first by name.
func (e *env) defaultClass(ctx context.Context) (*storagev1.StorageClass, error) {
	list, err := e.cs.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list StorageClasses: %w", err)
	}
	var mine []storagev1.StorageClass
	for _, sc := range list.Items {
		if sc.Provisioner == e.driver && !strings.HasPrefix(sc.Name, "kubevol-verify-") {
			if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
				return &sc, nil
			}
			mine = append(mine, sc)
		}
	}
	if len(mine) == 0 {
		return nil, nil
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].Name < mine[j].Name })
	return &mine[0], nil
}

func (e *env) baseName() string {
	if e.base == nil {
		return "(none: verify's own, no parameters)"
	}
	return e.base.Name
}

// findNode picks the node where the driver is registered, and its topology segment.
func (e *env) findNode(ctx context.Context) error {
	var keys []string
	err := kubecheck.Poll(ctx, e.o.Wait, func(ctx context.Context) (bool, error) {
		list, err := e.cs.StorageV1().CSINodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, cn := range list.Items {
			for _, d := range cn.Spec.Drivers {
				if d.Name == e.driver {
					e.node, keys = cn.Name, d.TopologyKeys
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("driver %s is registered on no node (no CSINode lists it): is it running and registered with the node agent?", e.driver)
	}
	node, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", e.node, err)
	}
	e.topology = map[string]string{}
	for _, k := range keys {
		if v, ok := node.Labels[k]; ok {
			e.topology[k] = v
		}
	}
	return nil
}

// askDriver finds the driver's socket through the node agent's plugin registry (what
// node-driver-registrar announced) and reads its capabilities.
func (e *env) askDriver(ctx context.Context) {
	if e.root == "" {
		return
	}
	endpoint, err := registeredEndpoint(ctx, filepath.Join(e.root, "plugins_registry"), e.driver)
	if err != nil || endpoint == "" {
		return
	}
	conn, err := csiclient.Dial(csiclient.Config{Address: endpoint, Timeout: 10 * time.Second})
	if err != nil {
		return
	}
	caps, err := readCapabilities(ctx, conn)
	if err != nil {
		_ = conn.Close()
		e.caps.pluginError = err.Error()
		return
	}
	caps.endpoint = endpoint
	e.conn, e.caps = conn, *caps
}

func readCapabilities(ctx context.Context, conn *csiclient.Conn) (*capabilities, error) {
	cctx, cancel := conn.WithTimeout(ctx)
	defer cancel()
	caps := &capabilities{known: true, controller: map[csi.ControllerServiceCapability_RPC_Type]bool{}}
	prsp, err := conn.Identity.GetPluginCapabilities(cctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		return nil, err
	}
	hasController := false
	for _, c := range prsp.GetCapabilities() {
		if c.GetService().GetType() == csi.PluginCapability_Service_CONTROLLER_SERVICE {
			hasController = true
		}
		switch c.GetVolumeExpansion().GetType() {
		case csi.PluginCapability_VolumeExpansion_ONLINE:
			caps.online = true
		case csi.PluginCapability_VolumeExpansion_OFFLINE:
			caps.offline = true
		}
	}
	if hasController {
		crsp, err := conn.Controller.ControllerGetCapabilities(cctx, &csi.ControllerGetCapabilitiesRequest{})
		if err != nil {
			return nil, err
		}
		for _, c := range crsp.GetCapabilities() {
			caps.controller[c.GetRpc().GetType()] = true
		}
	}
	if caps.node, err = conn.NodeCapabilities(ctx); err != nil {
		return nil, err
	}
	return caps, nil
}

// registeredEndpoint asks each registration socket in dir for its plugin and returns the
// CSI endpoint of driver, as the kubelet's plugin watcher learns it.
func registeredEndpoint(ctx context.Context, dir, driver string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, ent := range entries {
		if ent.Type()&os.ModeSocket == 0 {
			continue
		}
		cc, err := grpc.NewClient("unix://"+filepath.Join(dir, ent.Name()), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := registerapi.NewRegistrationClient(cc).GetInfo(cctx, &registerapi.InfoRequest{})
		cancel()
		_ = cc.Close()
		if err == nil && info.Name == driver {
			return info.Endpoint, nil
		}
	}
	return "", nil
}

func (e *env) describe() string {
	var parts []string
	if e.root != "" {
		parts = append(parts, "host checks through "+e.root)
	} else {
		parts = append(parts, "no host checks")
	}
	if e.caps.known {
		parts = append(parts, "capabilities from "+e.caps.endpoint)
	} else {
		parts = append(parts, "driver socket not reachable from here: capability-dependent cases all run")
	}
	parts = append(parts, fmt.Sprintf("attachRequired=%v", e.attachRequired()))
	return strings.Join(parts, ", ")
}

func (e *env) attachRequired() bool {
	return e.csiDriver.Spec.AttachRequired == nil || *e.csiDriver.Spec.AttachRequired
}

// has reports a controller capability; unknown capabilities count as present.
func (e *env) has(c csi.ControllerServiceCapability_RPC_Type) bool {
	return !e.caps.known || e.caps.controller[c]
}

// lacks says that the driver is known not to advertise a controller capability, or "".
func (e *env) lacks(c csi.ControllerServiceCapability_RPC_Type) string {
	if e.has(c) {
		return ""
	}
	return "the driver does not advertise " + c.String()
}

func (e *env) hasNode(c csi.NodeServiceCapability_RPC_Type) bool {
	return !e.caps.known || e.caps.node[c]
}

// Class variants the cases use, all derived from the driver's StorageClass.
const (
	classWFFC      = "wffc"
	classImmediate = "immediate"
	classRetain    = "retain"
	classBlock     = "block"
	classFS        = "xfs"
	// classOptions: Retain, with the mount options of the pv/fields case.
	classOptions = "options"
)

func (e *env) close() {
	if e.conn != nil {
		_ = e.conn.Close()
	}
}

// listVolumes is the driver's ListVolumes, all pages.
func (e *env) listVolumes(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	token := ""
	for {
		cctx, cancel := e.conn.WithTimeout(ctx)
		rsp, err := e.conn.Controller.ListVolumes(cctx, &csi.ListVolumesRequest{StartingToken: token})
		cancel()
		if err != nil {
			return nil, err
		}
		for _, v := range rsp.GetEntries() {
			out[v.GetVolume().GetVolumeId()] = true
		}
		if token = rsp.GetNextToken(); token == "" {
			return out, nil
		}
	}
}

const runLabel = "kubevol.io/verify-run"
