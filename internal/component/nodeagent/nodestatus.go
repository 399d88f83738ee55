package nodeagent

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kubevol/kubevol/internal/runtime/controller/write"
	"github.com/kubevol/kubevol/internal/runtime/version"
)

// Node annotation and lease namespace, as the kubelet uses them.
const (
	controllerManagedAttachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"
	leaseNamespace                    = "kube-node-lease"
	maxPods                           = 110
)

// machineCapacity reports what the scheduler needs to place pods here: CPUs, memory, the
// root dir's filesystem as ephemeral storage, and the kubelet's default of 110 pods.
func machineCapacity(rootDir string) v1.ResourceList {
	rl := v1.ResourceList{
		v1.ResourceCPU:  *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourcePods: *resource.NewQuantity(maxPods, resource.DecimalSI),
	}
	if mem := memTotal(); mem > 0 {
		rl[v1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
	}
	dir := rootDir
	for dir != "/" {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		dir = parentDir(dir)
	}
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil {
		rl[v1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(st.Blocks)*st.Bsize, resource.BinarySI)
	}
	return rl
}

func parentDir(p string) string {
	if i := strings.LastIndex(strings.TrimSuffix(p, "/"), "/"); i > 0 {
		return p[:i]
	}
	return "/"
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// registerNode creates the Node, or adopts an existing one, with our labels, the
// controller-managed attach/detach annotation, and a Ready status. It tries until the API
// server answers, however long it is away, as the kubelet does (its registration retries
// forever, at most 7 s apart): an agent started during an outage waits for it to end.
func (a *Agent) registerNode(ctx context.Context) error {
	nodes := a.cfg.Client.CoreV1().Nodes()
	return wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 7 * time.Second},
		func(ctx context.Context) (bool, error) {
			node, err := nodes.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = nodes.Create(ctx, a.newNode(), metav1.CreateOptions{})
			case err == nil:
				a.warnMissingTaints(ctx, node)
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
					"labels":      a.labels(),
					"annotations": map[string]string{controllerManagedAttachAnnotation: "true"},
				}})
				_, err = write.Nodes(a.cfg.Client).SendPatch(ctx, node, types.StrategicMergePatchType, patch)
			}
			if err != nil {
				klog.FromContext(ctx).Error(err, "Node registration failed, retrying")
				return false, nil
			}
			return true, a.updateNodeStatus(ctx)
		})
}

func (a *Agent) labels() map[string]string {
	l := map[string]string{
		v1.LabelHostname:   a.cfg.NodeName,
		v1.LabelOSStable:   runtime.GOOS,
		v1.LabelArchStable: runtime.GOARCH,
	}
	for k, v := range a.cfg.Labels {
		l[k] = v
	}
	return l
}

func (a *Agent) newNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        a.cfg.NodeName,
			Labels:      a.labels(),
			Annotations: map[string]string{controllerManagedAttachAnnotation: "true"},
		},
		Spec: v1.NodeSpec{Taints: append([]v1.Taint(nil), a.cfg.Taints...)},
	}
}

// updateNodeStatus patches the Ready condition, capacity and node info. volumesInUse is
// pkg/volumesinuse's, written apart.
func (a *Agent) updateNodeStatus(ctx context.Context) error {
	now := metav1.Now()
	a.mu.Lock()
	if a.readySince.IsZero() {
		a.readySince = now
	}
	since := a.readySince
	a.mu.Unlock()
	capacity := a.allocatable()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    capacity,
		"allocatable": capacity,
		"conditions": []v1.NodeCondition{{
			Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubevolReady",
			Message: "kubevol node agent is posting ready status", LastHeartbeatTime: now, LastTransitionTime: since,
		}},
		"nodeInfo": map[string]string{
			"kubeletVersion": "kubevol-" + version.Get(), "operatingSystem": runtime.GOOS, "architecture": runtime.GOARCH,
		},
	}})
	if err != nil {
		return err
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}
	_, err = write.Nodes(a.cfg.Client).SendStatusPatch(ctx, node, types.StrategicMergePatchType, patch)
	return err
}

// runNodeStatus refreshes the Node status every StatusInterval.
func (a *Agent) runNodeStatus(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(a.cfg.StatusInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		err := a.updateNodeStatus(ctx)
		if apierrors.IsNotFound(err) {
			// Someone deleted our Node: register it again, as the kubelet does on restart,
			// and list the volumes in use on the new object at once.
			logger.Info("Node object is gone, registering it again")
			if err = a.registerNode(ctx); err == nil {
				a.inUse.Notify()
			}
		}
		if err != nil {
			logger.Error(err, "Node status update failed")
		}
	}
}

// runLease heartbeats the Node's Lease in kube-node-lease, owned by the Node so it goes
// with it (upstream kubelet nodelease).
func (a *Agent) runLease(ctx context.Context) {
	nodes := a.cfg.Client.CoreV1().Nodes()
	c := lease.NewController(clock.RealClock{}, a.cfg.Client, a.cfg.NodeName, int32(a.cfg.LeaseDuration/time.Second), nil,
		a.cfg.LeaseDuration/4, a.cfg.NodeName, leaseNamespace,
		func(l *coordinationv1.Lease) error {
			if len(l.OwnerReferences) > 0 {
				return nil
			}
			node, err := nodes.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
			return nil
		})
	c.Run(ctx)
}
