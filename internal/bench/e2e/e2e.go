// Package e2e is `kubevol bench e2e`: N pods, each with its own PVC of the default
// StorageClass, from creation to every volume mounted, on a throwaway `kubevol up` stack
// (the real control plane plus every kubevol component as a process). It splits the time
// per pod into the phases of the lifecycle: the scheduler's node choice, provisioning,
// binding, the pod's binding, stage and publish, and the agent's report.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/cluster/up"
)

// Config is what one run measures.
type Config struct {
	Pods int
	// ClusterBinary is the kubevol-cluster binary; empty builds or finds it.
	ClusterBinary string
	OutDir        string
	Timeout       time.Duration
	// AttachRequired measures the attach path: CSIDriver attachRequired, VolumeAttachments.
	AttachRequired bool
	Out            io.Writer
}

// Series are the phases, each measured from the pod's creation.
var Series = []string{"node_selected", "provisioned", "claim_bound", "pod_bound", "attached", "staged", "published", "volumes_ready"}

// times are the instants observed for one pod (and its claim and volume).
type times struct {
	created, selected, provisioned, bound, podBound, attached, ready time.Time
	stageEnd, publishEnd                                             time.Time
	handle                                                           string
}

// Run starts the stack, measures and prints the figures, and removes everything.
func Run(ctx context.Context, cfg Config) (err error) {
	out := cfg.Out
	if os.Geteuid() != 0 {
		return errors.New("bench e2e mounts volumes: run it as root")
	}
	dir, err := os.MkdirTemp("", "kubevol-bench-e2e-")
	if err != nil {
		return err
	}
	callLog := filepath.Join(dir, "calls.jsonl")
	fmt.Fprintln(out, "starting a throwaway kubevol up stack")
	stack, err := up.Start(ctx, up.Options{Dir: filepath.Join(dir, "up"), ClusterBinary: cfg.ClusterBinary, NodeName: "bench-e2e-node",
		Progress: io.Discard, CallLog: callLog, UnsafeNoFsync: true, AttachRequired: cfg.AttachRequired})
	if err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	defer func() {
		err = errors.Join(err, stack.Stop(), removeAll(dir))
	}()
	rc := stack.Cluster.RESTConfig()
	rc.QPS, rc.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, cs: cs, ns: "bench-e2e", byClaim: map[string]*times{}, claimOfPV: map[string]string{}, early: map[string]time.Time{}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.cleanup(context.WithoutCancel(ctx))) }()
	if err := b.waitServiceAccount(ctx); err != nil {
		return err
	}

	start := time.Now()
	if err := b.run(ctx); err != nil {
		return err
	}
	total := time.Since(start)
	if err := b.readCallLog(callLog); err != nil {
		return err
	}
	run := b.report(start)
	fmt.Fprintf(out, "\n%d pods, each with its own PVC (%s, WaitForFirstConsumer), from pod creation:\n", cfg.Pods, up.DefaultStorageClass)
	run.WriteTable(out)
	fmt.Fprintf(out, "all %d pods' volumes mounted %s after the first pod was created\n", cfg.Pods, report.Round(total))
	b.writePhases(run)
	return run.WriteFiles(cfg.OutDir, "e2e", fmt.Sprintf("kubevol e2e: %d pods with a PVC each, from pod creation", cfg.Pods), out)
}

type bench struct {
	cfg Config
	cs  kubernetes.Interface
	ns  string

	mu      sync.Mutex
	byClaim map[string]*times // by claim name, which is the pod name
	// claimOfPV maps PV names to claims; early holds attachments seen before their PV.
	claimOfPV map[string]string
	early     map[string]time.Time
}

func (b *bench) get(name string) *times {
	t := b.byClaim[name]
	if t == nil {
		t = &times{}
		b.byClaim[name] = t
	}
	return t
}

func stamp(t *time.Time, now time.Time) {
	if t.IsZero() {
		*t = now
	}
}

// run creates the pods and claims and observes them through informers until every pod's
// volumes are ready.
func (b *bench) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	f := informers.NewSharedInformerFactoryWithOptions(b.cs, 0, informers.WithNamespace(b.ns))
	all := informers.NewSharedInformerFactory(b.cs, 0)
	readyCh := make(chan struct{}, b.cfg.Pods)
	progress := report.NewProgress(b.cfg.Out, "pods with volumes mounted", b.cfg.Pods)
	ready := 0
	onClaim := func(obj any) {
		pvc, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok {
			return
		}
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		t := b.get(pvc.Name)
		if pvc.Annotations["volume.kubernetes.io/selected-node"] != "" {
			stamp(&t.selected, now)
		}
		if pvc.Status.Phase == corev1.ClaimBound {
			stamp(&t.bound, now)
		}
	}
	onVolume := func(obj any) {
		pv, ok := obj.(*corev1.PersistentVolume)
		if !ok || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Namespace != b.ns {
			return
		}
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		t := b.get(pv.Spec.ClaimRef.Name)
		stamp(&t.provisioned, now)
		b.claimOfPV[pv.Name] = pv.Spec.ClaimRef.Name
		if at, ok := b.early[pv.Name]; ok {
			stamp(&t.attached, at)
		}
		if pv.Spec.CSI != nil {
			t.handle = pv.Spec.CSI.VolumeHandle
		}
	}
	onPod := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		t := b.get(pod.Name)
		if pod.Spec.NodeName != "" {
			stamp(&t.podBound, now)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == "kubevol.io/VolumesReady" && c.Status == corev1.ConditionTrue && t.ready.IsZero() {
				t.ready = now
				ready++
				progress.Set(ready)
				readyCh <- struct{}{}
			}
		}
	}
	onAttachment := func(obj any) {
		va, ok := obj.(*storagev1.VolumeAttachment)
		if !ok || !va.Status.Attached || va.Spec.Source.PersistentVolumeName == nil {
			return
		}
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		if claim, ok := b.claimOfPV[*va.Spec.Source.PersistentVolumeName]; ok {
			stamp(&b.get(claim).attached, now)
		} else {
			b.early[*va.Spec.Source.PersistentVolumeName] = now
		}
	}
	handler := func(fn func(any)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{AddFunc: fn, UpdateFunc: func(_, o any) { fn(o) }}
	}
	if _, err := f.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(handler(onClaim)); err != nil {
		return err
	}
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(handler(onPod)); err != nil {
		return err
	}
	if _, err := all.Core().V1().PersistentVolumes().Informer().AddEventHandler(handler(onVolume)); err != nil {
		return err
	}
	if _, err := all.Storage().V1().VolumeAttachments().Informer().AddEventHandler(handler(onAttachment)); err != nil {
		return err
	}
	f.Start(ctx.Done())
	all.Start(ctx.Done())
	// Shutdown waits for the informers, which stop when ctx ends: cancel first.
	defer func() {
		cancel()
		f.Shutdown()
		all.Shutdown()
	}()
	f.WaitForCacheSync(ctx.Done())
	all.WaitForCacheSync(ctx.Done())

	if err := b.create(ctx); err != nil {
		return err
	}
	for i := 0; i < b.cfg.Pods; i++ {
		select {
		case <-readyCh:
		case <-ctx.Done():
			progress.Finish()
			return fmt.Errorf("only %d of %d pods had their volumes mounted within %s", i, b.cfg.Pods, b.cfg.Timeout)
		}
	}
	progress.Finish()
	return nil
}

// create makes the claims and pods with a few concurrent clients, as a Deployment's
// replicas would arrive.
func (b *bench) create(ctx context.Context) error {
	sc := up.DefaultStorageClass
	work := make(chan int)
	errCh := make(chan error, 1)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("app-%04d", i)
				b.mu.Lock()
				stamp(&b.get(name).created, time.Now())
				b.mu.Unlock()
				pvc := &corev1.PersistentVolumeClaim{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						StorageClassName: &sc,
						Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
					},
				}
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: corev1.PodSpec{
						AutomountServiceAccountToken: new(bool),
						Containers: []corev1.Container{{Name: "app", Image: "busybox",
							VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
						Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
							PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
					},
				}
				_, err := b.cs.CoreV1().PersistentVolumeClaims(b.ns).Create(ctx, pvc, metav1.CreateOptions{})
				if err == nil {
					_, err = b.cs.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{})
				}
				if err != nil {
					select {
					case errCh <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < b.cfg.Pods; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errCh:
		return err
	default:
		return nil
	}
}

// waitServiceAccount waits for the namespace's default ServiceAccount, without which the
// admission plugin refuses pods.
func (b *bench) waitServiceAccount(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := b.cs.CoreV1().ServiceAccounts(b.ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// readCallLog takes the end of each volume's NodeStage and NodePublish from the driver.
func (b *bench) readCallLog(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	byHandle := map[string]*times{}
	for _, t := range b.byClaim {
		if t.handle != "" {
			byHandle[t.handle] = t
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c struct {
			End      time.Time `json:"end"`
			Method   string    `json:"method"`
			VolumeID string    `json:"volumeID"`
			Code     string    `json:"code"`
		}
		if json.Unmarshal(sc.Bytes(), &c) != nil || c.Code != "OK" {
			continue
		}
		t := byHandle[c.VolumeID]
		if t == nil {
			continue
		}
		switch c.Method {
		case "NodeStageVolume":
			stamp(&t.stageEnd, c.End)
		case "NodePublishVolume":
			stamp(&t.publishEnd, c.End)
		}
	}
	return sc.Err()
}

func (b *bench) report(start time.Time) *report.Run {
	b.mu.Lock()
	defer b.mu.Unlock()
	run := &report.Run{Series: Series}
	since := func(t *times, at time.Time) time.Duration {
		if at.IsZero() {
			return -1
		}
		return at.Sub(t.created)
	}
	for name, t := range b.byClaim {
		if t.created.IsZero() {
			continue
		}
		run.Samples = append(run.Samples, report.Sample{Name: name, Start: t.created.Sub(start), Values: []time.Duration{
			since(t, t.selected), since(t, t.provisioned), since(t, t.bound), since(t, t.podBound),
			since(t, t.attached), since(t, t.stageEnd), since(t, t.publishEnd), since(t, t.ready),
		}})
	}
	return run
}

// writePhases prints where the time goes: the p50 and p99 of each phase's own duration,
// the difference between consecutive milestones.
func (b *bench) writePhases(run *report.Run) {
	out := b.cfg.Out
	fmt.Fprintf(out, "\nwhere the time goes (each phase alone):\n%-34s %9s %9s\n", "phase", "p50", "p99")
	names := []string{"schedule (scheduler picks the node)", "provision (CreateVolume, PV)", "bind (PV controller)",
		"schedule (pod bound to the node)", "attach (VolumeAttachment attached)", "stage (NodeStageVolume done)",
		"publish (NodePublishVolume done)", "report (VolumesReady written)"}
	for i := range Series {
		var d []time.Duration
		for _, s := range run.Samples {
			// A phase runs from the latest milestone before it that was reached.
			cur, prev := s.Values[i], time.Duration(0)
			for j := i - 1; j >= 0; j-- {
				if s.Values[j] >= 0 {
					prev = s.Values[j]
					break
				}
			}
			if cur < 0 {
				continue
			}
			d = append(d, cur-prev)
		}
		if len(d) == 0 {
			fmt.Fprintf(out, "%-34s %9s %9s\n", names[i], "-", "-")
			continue
		}
		st := report.Summarize(d)
		fmt.Fprintf(out, "%-34s %9s %9s\n", names[i], report.Round(st.P50), report.Round(st.P99))
	}
	if !b.cfg.AttachRequired {
		fmt.Fprintln(out, "(no attach phase: the kubevol-local CSIDriver has attachRequired: false; --attach-required measures it)")
	}
}

// cleanup deletes the pods (the agent unpublishes and unstages), then the claims (the
// provisioner deletes the volumes), and waits for both, so nothing is left mounted.
func (b *bench) cleanup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := b.cs.CoreV1().Pods(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := b.cs.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("pods not torn down: %w", err)
	}
	if err := b.cs.CoreV1().PersistentVolumeClaims(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := b.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
}

// removeAll unmounts whatever is still mounted below dir (after a failed run) before
// removing it, so the removal never reaches through a mount into a volume.
func removeAll(dir string) error {
	mps, _ := mount.New("").List()
	var errs []error
	for i := len(mps) - 1; i >= 0; i-- {
		if strings.HasPrefix(mps[i].Path, dir+"/") {
			errs = append(errs, mount.New("").Unmount(mps[i].Path))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unmount leftovers below %s: %w", dir, err)
	}
	return os.RemoveAll(dir)
}
