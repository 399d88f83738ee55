package up

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/runtime/csiclient"
)

// DriverError is a --driver that up cannot use: unreachable, or answering nonsense. The
// command line treats it as a bad flag.
type DriverError struct {
	Endpoint string
	Err      error
}

func (e *DriverError) Error() string { return fmt.Sprintf("--driver %s: %v", e.Endpoint, e.Err) }
func (e *DriverError) Unwrap() error { return e.Err }

// driverWait bounds how long up waits for an external driver to answer Probe: it may
// be starting at the same time as up.
var driverWait = 15 * time.Second

// externalDriver is a CSI driver that up did not start (--driver): up asks it who it is,
// registers it with the node agent unless it registers itself, creates its CSIDriver and
// StorageClass, and runs its sidecars. The driver process itself is left alone.
type externalDriver struct {
	endpoint string // as given
	socket   string // its path
	conn     *csiclient.Conn

	name       string
	vendor     string
	plugin     map[csi.PluginCapability_Service_Type]bool
	controller map[csi.ControllerServiceCapability_RPC_Type]bool
	node       map[csi.NodeServiceCapability_RPC_Type]bool
	nodeID     string

	cfg            DriverConfig
	selfRegistered bool
	attachRequired bool // as the CSIDriver object says
	// storageCapacity, as the CSIDriver object says: the scheduler then waits for
	// CSIStorageCapacity objects, which the provisioner must publish.
	storageCapacity bool
	// unapplied are the --driver-config fields that the CSIDriver found contradicts.
	unapplied []string

	sidecars  []*component
	regCancel context.CancelFunc
	regDone   chan struct{}

	// kubeNode is the Node this instance serves; registry its node agent's plugin
	// registry, "" for the first node's (up's usual one).
	kubeNode, registry string
	// nodeInstances are the driver's instances on the other nodes (--driver with
	// NodePlaceholder): registered each with its node, no sidecars or objects of their own.
	nodeInstances []*externalDriver
}

// probeDriver asks a driver who it is, as node-driver-registrar and the sidecars do at
// start: Probe until ready, GetPluginInfo, the plugin, controller and node capabilities,
// NodeGetInfo. Errors are *DriverError.
func probeDriver(ctx context.Context, endpoint string) (*externalDriver, error) {
	return probeInstance(ctx, endpoint, true)
}

// probeInstance is probeDriver; without controller it asks only what node-driver-registrar
// asks a node instance (a DaemonSet pod need not serve the Controller service, though its
// plugin capabilities describe the whole plugin, controller included).
func probeInstance(ctx context.Context, endpoint string, controller bool) (*externalDriver, error) {
	fail := func(format string, args ...any) (*externalDriver, error) {
		return nil, &DriverError{Endpoint: endpoint, Err: fmt.Errorf(format, args...)}
	}
	target, err := csiclient.Target(endpoint)
	if err != nil {
		return fail("%v", err)
	}
	d := &externalDriver{endpoint: endpoint, socket: target[len("unix://"):]}
	if !filepath.IsAbs(d.socket) {
		return fail("want an absolute path, unix:///path/csi.sock")
	}
	d.conn, err = csiclient.Dial(csiclient.Config{Address: endpoint})
	if err != nil {
		return fail("%v", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = d.conn.Close()
		}
	}()
	pctx, cancel := context.WithTimeout(ctx, driverWait)
	err = d.conn.ProbeForever(pctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			if _, serr := os.Stat(d.socket); serr != nil {
				return fail("no socket at %s after %s (is the driver running?)", d.socket, driverWait)
			}
			return fail("no CSI driver answered Probe within %s (is this the driver's socket?)", driverWait)
		}
		return fail("%v", err)
	}
	cctx, cancel := d.conn.WithTimeout(ctx)
	defer cancel()
	info, err := d.conn.Identity.GetPluginInfo(cctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return fail("GetPluginInfo: %v", err)
	}
	d.name, d.vendor = info.GetName(), info.GetVendorVersion()
	if err := validateDriverName(d.name); err != nil {
		return fail("GetPluginInfo returned the invalid driver name %q: %v", d.name, err)
	}
	if controller {
		caps, err := d.conn.Capabilities(ctx)
		if err != nil {
			return fail("%v", err)
		}
		d.plugin, d.controller = caps.Plugin, caps.Controller
	}
	if d.node, err = d.conn.NodeCapabilities(ctx); err != nil {
		return fail("%v", err)
	}
	ni, err := d.conn.Node.NodeGetInfo(cctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return fail("NodeGetInfo: %v", err)
	}
	if d.nodeID = ni.GetNodeId(); d.nodeID == "" {
		return fail("NodeGetInfo returned an empty node ID")
	}
	ok = true
	return d, nil
}

// hasController reports whether the driver can provision: without CREATE_DELETE_VOLUME
// there is nothing for a provisioner or a StorageClass to do.
func (d *externalDriver) hasController() bool {
	return d.plugin[csi.PluginCapability_Service_CONTROLLER_SERVICE] && d.controller[csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME]
}

// canExpand: the resizer runs when the controller or the node can expand, as a deployment
// of external-resizer would be chosen.
func (d *externalDriver) canExpand() bool {
	return d.controller[csi.ControllerServiceCapability_RPC_EXPAND_VOLUME] || d.node[csi.NodeServiceCapability_RPC_EXPAND_VOLUME]
}

// csiDriverSpec derives the CSIDriver object from the capabilities, then applies the
// overrides of --driver-config.
func (d *externalDriver) csiDriverSpec() storagev1.CSIDriverSpec {
	spec := storagev1.CSIDriverSpec{
		AttachRequired:       ptr.To(d.controller[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME]),
		StorageCapacity:      ptr.To(d.controller[csi.ControllerServiceCapability_RPC_GET_CAPACITY]),
		PodInfoOnMount:       ptr.To(true),
		FSGroupPolicy:        ptr.To(storagev1.FileFSGroupPolicy),
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
	}
	c := d.cfg
	if c.AttachRequired != nil {
		spec.AttachRequired = c.AttachRequired
	}
	if c.StorageCapacity != nil {
		spec.StorageCapacity = c.StorageCapacity
	}
	if c.PodInfoOnMount != nil {
		spec.PodInfoOnMount = c.PodInfoOnMount
	}
	if c.RequiresRepublish != nil {
		spec.RequiresRepublish = c.RequiresRepublish
	}
	if c.FSGroupPolicy != nil {
		spec.FSGroupPolicy = c.FSGroupPolicy
	}
	if len(c.VolumeLifecycleModes) > 0 {
		spec.VolumeLifecycleModes = c.VolumeLifecycleModes
	}
	spec.SELinuxMount = c.SELinuxMount
	spec.NodeAllocatableUpdatePeriodSeconds = c.NodeAllocatableUpdatePeriodSeconds
	return spec
}

// installDriverObjects creates the driver's CSIDriver and StorageClass unless they exist:
// they may be the user's own, and up never overwrites them.
func (d *externalDriver) installDriverObjects(ctx context.Context, cs kubernetes.Interface, resizer bool) error {
	// The StorageClass first: a client that waits for the CSIDriver (kubevol verify, a CI
	// script) then finds the class too.
	if d.hasController() {
		mode := storagev1.VolumeBindingWaitForFirstConsumer
		var params map[string]string
		if sc := d.cfg.StorageClass; sc != nil {
			if sc.VolumeBindingMode != nil {
				mode = *sc.VolumeBindingMode
			}
			params = sc.Parameters
		}
		sc := &storagev1.StorageClass{
			ObjectMeta:  metav1.ObjectMeta{Name: d.name, Labels: map[string]string{"app.kubernetes.io/managed-by": fieldManager}},
			Provisioner: d.name,
			Parameters:  params,
			// This is a one-node cluster: binding where the pod runs is right for every
			// driver, topology or not.
			VolumeBindingMode:    &mode,
			ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
			AllowVolumeExpansion: ptr.To(resizer),
		}
		if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("StorageClass %s: %w", d.name, err)
		}
	}
	obj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d.name, Labels: map[string]string{"app.kubernetes.io/managed-by": fieldManager}}, Spec: d.csiDriverSpec()}
	got, err := cs.StorageV1().CSIDrivers().Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsAlreadyExists(err) {
		if got, err = cs.StorageV1().CSIDrivers().Get(ctx, d.name, metav1.GetOptions{}); err == nil {
			d.unapplied = d.unappliedConfig(got.Spec)
		}
	}
	if err != nil {
		return fmt.Errorf("CSIDriver %s: %w", d.name, err)
	}
	// No attachRequired means true, as the attach/detach controller reads it.
	d.attachRequired = got.Spec.AttachRequired == nil || *got.Spec.AttachRequired
	d.storageCapacity = got.Spec.StorageCapacity != nil && *got.Spec.StorageCapacity
	return nil
}

// unappliedConfig names the --driver-config fields that an existing CSIDriver contradicts:
// up never changes the object, and an override must not be dropped without a word.
func (d *externalDriver) unappliedConfig(have storagev1.CSIDriverSpec) []string {
	want := d.csiDriverSpec()
	c := d.cfg
	var out []string
	differs := func(set bool, field string, a, b *bool) {
		if set && !ptr.Equal(a, b) {
			out = append(out, field)
		}
	}
	differs(c.AttachRequired != nil, "attachRequired", want.AttachRequired, have.AttachRequired)
	differs(c.StorageCapacity != nil, "storageCapacity", want.StorageCapacity, have.StorageCapacity)
	differs(c.PodInfoOnMount != nil, "podInfoOnMount", want.PodInfoOnMount, have.PodInfoOnMount)
	differs(c.RequiresRepublish != nil, "requiresRepublish", want.RequiresRepublish, have.RequiresRepublish)
	differs(c.SELinuxMount != nil, "seLinuxMount", want.SELinuxMount, have.SELinuxMount)
	if c.NodeAllocatableUpdatePeriodSeconds != nil && !ptr.Equal(c.NodeAllocatableUpdatePeriodSeconds, have.NodeAllocatableUpdatePeriodSeconds) {
		out = append(out, "nodeAllocatableUpdatePeriodSeconds")
	}
	if c.FSGroupPolicy != nil && (have.FSGroupPolicy == nil || *have.FSGroupPolicy != *c.FSGroupPolicy) {
		out = append(out, "fsGroupPolicy")
	}
	if len(c.VolumeLifecycleModes) > 0 && !slices.Equal(slices.Sorted(slices.Values(c.VolumeLifecycleModes)), slices.Sorted(slices.Values(have.VolumeLifecycleModes))) {
		out = append(out, "volumeLifecycleModes")
	}
	return out
}

// registeredBy returns the registration socket in dir through which a driver named name
// registers itself (its own node-driver-registrar), or "".
func registeredBy(ctx context.Context, dir, name string) string {
	var found string
	_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || found != "" || e.Type()&fs.ModeSocket == 0 {
			return nil
		}
		conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := registerapi.NewRegistrationClient(conn).GetInfo(cctx, &registerapi.InfoRequest{})
		if err == nil && info.GetName() == name {
			found = path
		}
		return nil
	})
	return found
}

// fileLogger logs to the component log file name, for what up runs in its own process: up's
// terminal shows the status line and events only.
func (s *Stack) fileLogger(name string) klog.Logger {
	f, err := os.OpenFile(s.Cluster.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return klog.Background()
	}
	s.logFiles = append(s.logFiles, f)
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(f)))
}

// startDrivers brings up each external driver after the node agent runs.
func (s *Stack) startDrivers(ctx context.Context, cs kubernetes.Interface) error {
	regDir := s.path("node", "plugins_registry")
	for _, d := range s.drivers {
		if err := s.register(ctx, cs, d, regDir); err != nil {
			return err
		}
		for _, inst := range d.nodeInstances {
			if err := s.register(ctx, cs, inst, inst.registry); err != nil {
				return err
			}
		}
		if err := d.installDriverObjects(ctx, cs, d.canExpand()); err != nil {
			return err
		}
		if len(d.unapplied) > 0 {
			fmt.Fprintf(s.opts.Progress, "note: CSIDriver %s exists and up never changes it, so --driver-config's %s is not applied: kubectl delete csidriver %s and restart up, or start it with --reset\n",
				d.name, strings.Join(d.unapplied, ", "), d.name)
		}
		if err := s.startSidecars(ctx, cs, d); err != nil {
			return err
		}
		fmt.Fprintf(s.opts.Progress, "driver %s ready (%s)\n", d.name, d.describe())
	}
	return nil
}

func (s *Stack) startSidecars(ctx context.Context, cs kubernetes.Interface, d *externalDriver) error {
	var kinds []string
	if d.hasController() {
		kinds = append(kinds, "provisioner")
	}
	if d.attachRequired {
		kinds = append(kinds, "attacher")
	}
	// The resizer also modifies volumes (VolumeAttributesClass), as external-resizer does.
	if d.canExpand() || d.controller[csi.ControllerServiceCapability_RPC_MODIFY_VOLUME] {
		kinds = append(kinds, "resizer")
	}
	if d.controller[csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT] {
		kinds = append(kinds, "snapshotter")
	}
	ports, err := localcluster.FreePorts(len(kinds))
	if err != nil {
		return err
	}
	for i, kind := range kinds {
		addr := "127.0.0.1:" + strconv.Itoa(ports[i])
		role := kind
		if kind == "snapshotter" {
			role = "csi-snapshotter"
		}
		kubeconfig, err := s.sidecarKubeconfig(ctx, cs, role)
		if err != nil {
			return err
		}
		args := append(s.sidecarArgs(kind, d.endpoint, kubeconfig), "--http-endpoint", addr)
		if kind == "snapshotter" {
			// Only its csi-snapshotter: the cluster's snapshot-controller runs with kubevol's driver.
			args = append(args, "--snapshot-controller=false")
		}
		c := newComponent(d.name+" "+kind, s.opts.KubevolBinary, args, s.Cluster.LogPath("kubevol-"+d.name+"-"+kind), "http://"+addr+"/healthz")
		if kind == "provisioner" && d.storageCapacity {
			// As external-provisioner deployed with --enable-capacity; the objects live in
			// up's namespace and have no owner (there is no pod to own them).
			c.args = append(c.args, "--enable-capacity", "--capacity-ownerref-level", "-1")
			c.env = []string{"NAMESPACE=" + Namespace}
		}
		if err := s.startComponent(ctx, c, &d.sidecars); err != nil {
			return err
		}
	}
	return nil
}

// sidecarArgs are the arguments of a kubevol controller sidecar for the driver at endpoint,
// running with kubeconfig (its ServiceAccount's, sidecarKubeconfig).
func (s *Stack) sidecarArgs(kind, endpoint, kubeconfig string) []string {
	args := []string{kind, "--csi-address", endpoint, "--kubeconfig", kubeconfig, "--leader-election-namespace", Namespace}
	if kind == "provisioner" {
		args = append(args, "--intent-namespace", Namespace)
	}
	return args
}

func (d *externalDriver) describe() string {
	var parts []string
	if d.selfRegistered {
		parts = append(parts, "self-registered")
	}
	if d.attachRequired {
		parts = append(parts, "attach required")
	}
	if !d.hasController() {
		parts = append(parts, "no controller: no provisioner, no StorageClass")
	} else {
		parts = append(parts, "StorageClass "+d.name)
	}
	return strings.Join(parts, ", ")
}

// waitRegistered waits until the node agent has published the driver on the CSINode, the
// sign that it registered and can mount its volumes.
func waitRegistered(ctx context.Context, cs kubernetes.Interface, node, driver string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(n.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver }), nil
	})
}

// driverStatus is the driver's own line of the status: it answers Probe or not.
func (d *externalDriver) status(ctx context.Context) localcluster.ComponentStatus {
	st := localcluster.ComponentStatus{Name: "driver " + d.name, Running: true}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rsp, err := d.conn.Identity.Probe(cctx, &csi.ProbeRequest{})
	switch {
	case err != nil:
		st.Detail = err.Error()
	case rsp.GetReady() != nil && !rsp.GetReady().GetValue():
		st.Detail = "not ready"
	default:
		st.Healthy = true
	}
	return st
}

// stopRegistration removes up's registration socket, once the node agent is stopped, so
// that the driver stays on the CSINode as it would while a kubelet is down.
func (d *externalDriver) stopRegistration() {
	for _, inst := range d.nodeInstances {
		inst.stopRegistration()
	}
	if d.regCancel != nil {
		d.regCancel()
		<-d.regDone
	}
	_ = d.conn.Close()
}

// checkDrivers rejects duplicate drivers and those that take the built-in driver's name.
func checkDrivers(ds []*externalDriver) error {
	seen := map[string]string{DriverName: "the built-in driver"}
	sockets := map[string]string{}
	for _, d := range ds {
		sock := filepath.Clean(d.socket)
		if other, ok := sockets[sock]; ok && d.socket != "" {
			return &DriverError{Endpoint: d.endpoint, Err: fmt.Errorf("given twice (also as %s)", other)}
		}
		sockets[sock] = d.endpoint
		if other, ok := seen[d.name]; ok {
			return &DriverError{Endpoint: d.endpoint, Err: fmt.Errorf("driver name %s is already taken by %s", d.name, other)}
		}
		seen[d.name] = d.endpoint
	}
	return nil
}

func closeDrivers(ds []*externalDriver) {
	for _, d := range ds {
		closeDrivers(d.nodeInstances)
		_ = d.conn.Close()
	}
}
