// Package provision is `kubevol bench provision`: it creates N claims against a cluster and
// measures how fast the provisioner turns them into PVs and the PV controller binds them,
// and what the provisioner costs in CPU and memory.
package provision

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/bench/target"
)

// Drivers the benchmark can run.
const (
	// DriverMemory is an in-memory CSI controller whose CreateVolume costs nothing, so that
	// the figures are the provisioner's (upstream's were measured that way).
	DriverMemory = "memory"
	// DriverKubevol is `kubevol driver`, which creates real directories and records state.
	DriverKubevol = "kubevol"
)

// Config is what one run measures.
type Config struct {
	// Driver is DriverMemory or DriverKubevol (without StorageClass).
	Driver string
	Count  int
	// Kubeconfig of the cluster; empty means the `kubevol up` cluster if it runs, else a
	// throwaway local cluster.
	Kubeconfig string
	// StorageClass to use; empty means a kubevol driver and provisioner started for the run.
	StorageClass string
	// Precreate creates every claim before the provisioner starts.
	Precreate bool
	// OutDir receives provision.csv and provision.svg.
	OutDir string
	// Binary is the kubevol executable that runs the driver and the provisioner.
	Binary string
	// ProvisionerArgs are extra `kubevol provisioner` flags, e.g. to compare settings.
	ProvisionerArgs []string
	// KubeAPIQPS and KubeAPIBurst are both provisioners' client limits: the same for both,
	// as a comparison of two rate limiters would measure only the limits.
	KubeAPIQPS   float64
	KubeAPIBurst int
	// Upstream is upstream's csi-provisioner binary, run on the same claims after kubevol's
	// in the same run ("" skips it); UpstreamVersion names it in the figures.
	Upstream, UpstreamVersion string
	Timeout                   time.Duration
	Out                       io.Writer
}

// result is one provisioner's figures in a run.
type result struct {
	name              string
	lastPV, lastBound time.Duration
	cpuAtPVs, cpuAll  time.Duration
	peakRSS           float64 // MiB
	ok                bool
}

type claimTimes struct {
	name                     string
	created, pvSeen, boundAt time.Time
}

// Run runs the benchmark and prints its figures to cfg.Out.
func Run(ctx context.Context, cfg Config) error {
	out := cfg.Out
	cluster, err := target.Pick(ctx, cfg.Kubeconfig, out)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	restCfg := cluster.Config
	cfg.Kubeconfig = cluster.Kubeconfig
	restCfg.QPS, restCfg.Burst = -1, 0 // the benchmark client must not be the bottleneck
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	var results []result
	kv, err := runOnce(ctx, cs, cfg, "kubevol", "")
	if err != nil {
		return err
	}
	results = append(results, kv)
	if cfg.Upstream != "" && cfg.StorageClass == "" {
		fmt.Fprintf(out, "\n=== the same %d claims with upstream's external-provisioner %s ===\n", cfg.Count, cfg.UpstreamVersion)
		up, err := runOnce(ctx, cs, cfg, "upstream "+cfg.UpstreamVersion, cfg.Upstream)
		if err != nil {
			return err
		}
		results = append(results, up)
		compare(out, cfg, results)
	}
	return nil
}

// compare prints one row per provisioner and the ratio of the first to the second.
func compare(out io.Writer, cfg Config, rs []result) {
	fmt.Fprintf(out, "\n%d claims: kubevol against upstream in the same run, both at QPS %g and burst %d (all PVs in %s at the soonest)\n",
		cfg.Count, cfg.KubeAPIQPS, cfg.KubeAPIBurst, report.Round(clientFloor(cfg)))
	fmt.Fprintf(out, "%-24s %10s %10s %12s %10s %10s\n", "provisioner", "all PVs", "all Bound", "CPU to PVs", "CPU all", "peak RSS")
	for _, r := range rs {
		if !r.ok {
			fmt.Fprintf(out, "%-24s timed out\n", r.name)
			continue
		}
		fmt.Fprintf(out, "%-24s %9.2fs %9.2fs %11.2fs %9.2fs %6.1f MiB\n", r.name, r.lastPV.Seconds(), r.lastBound.Seconds(), r.cpuAtPVs.Seconds(), r.cpuAll.Seconds(), r.peakRSS)
	}
	if len(rs) == 2 && rs[0].ok && rs[1].ok {
		a, b := rs[0], rs[1]
		ratio := func(x, y float64) float64 {
			if y == 0 {
				return 0
			}
			return x / y
		}
		fmt.Fprintf(out, "%-24s %10.2f %10.2f %12.2f %10.2f %10.2f\n", "ratio kubevol/upstream",
			ratio(a.lastPV.Seconds(), b.lastPV.Seconds()), ratio(a.lastBound.Seconds(), b.lastBound.Seconds()),
			ratio(a.cpuAtPVs.Seconds(), b.cpuAtPVs.Seconds()), ratio(a.cpuAll.Seconds(), b.cpuAll.Seconds()), ratio(a.peakRSS, b.peakRSS))
	}
}

// clientFloor is the soonest a provisioner at cfg's client limits can have created one PV
// per claim: its token bucket starts full at the burst and refills at the QPS, and every
// PV create takes a token (client-go's flowcontrol).
func clientFloor(cfg Config) time.Duration {
	if cfg.KubeAPIQPS <= 0 || cfg.Count <= cfg.KubeAPIBurst {
		return 0
	}
	return time.Duration(float64(cfg.Count-cfg.KubeAPIBurst) / cfg.KubeAPIQPS * float64(time.Second))
}

// runOnce provisions cfg.Count claims in a namespace of their own with one provisioner:
// kubevol's, or the upstream binary when upstream is set.
func runOnce(ctx context.Context, cs kubernetes.Interface, cfg Config, name, upstream string) (result, error) {
	res := result{name: name}
	out := cfg.Out
	ns := "bench-provision-" + rand.String(5)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}

	var sut *system
	var err error
	class := cfg.StorageClass
	if class == "" {
		if sut, err = startSystem(ctx, cs, cfg, ns); err != nil {
			return res, err
		}
		sut.upstream = upstream
		defer sut.stop()
		class = sut.class
	}

	var mu sync.Mutex
	byUID := map[types.UID]*claimTimes{}
	pvSeen, bound := 0, 0
	progress := report.NewProgress(out, "bound", cfg.Count)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	pvFactory := informers.NewSharedInformerFactory(cs, 0)
	_, _ = pvFactory.Core().V1().PersistentVolumes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		pv := obj.(*corev1.PersistentVolume)
		if r := pv.Spec.ClaimRef; r != nil && r.Namespace == ns {
			now := time.Now()
			mu.Lock()
			if ct := byUIDGet(byUID, r.UID); ct.pvSeen.IsZero() {
				ct.pvSeen = now
				pvSeen++
			}
			mu.Unlock()
		}
	}})
	onClaim := func(obj any) {
		pvc := obj.(*corev1.PersistentVolumeClaim)
		if pvc.Status.Phase != corev1.ClaimBound {
			return
		}
		now := time.Now()
		mu.Lock()
		ct := byUIDGet(byUID, pvc.UID)
		if ct.boundAt.IsZero() {
			ct.boundAt = now
			bound++
			progress.Set(bound)
		}
		mu.Unlock()
	}
	_, _ = factory.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onClaim, UpdateFunc: func(_, o any) { onClaim(o) }})
	factory.Start(ctx.Done())
	pvFactory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	pvFactory.WaitForCacheSync(ctx.Done())

	if sut != nil && !cfg.Precreate {
		if err := sut.startProvisioner(ctx); err != nil {
			return res, err
		}
	}
	fmt.Fprintf(out, "creating %d claims in namespace %s (StorageClass %s)\n", cfg.Count, ns, class)
	createStart := time.Now()
	if err := createClaims(ctx, cs, ns, class, cfg.Count, func(uid types.UID, name string, at time.Time) {
		mu.Lock()
		ct := byUIDGet(byUID, uid)
		ct.name, ct.created = name, at
		mu.Unlock()
	}); err != nil {
		return res, err
	}
	createDur := time.Since(createStart)
	start := createStart
	var cpu0 time.Duration
	if sut != nil && cfg.Precreate {
		start = time.Now()
		if err := sut.startProvisioner(ctx); err != nil {
			return res, err
		}
	}
	if sut != nil {
		cpu0, _ = sut.cpu()
		if rss, err := sut.rss("VmRSS:"); err == nil {
			fmt.Fprintf(out, "provisioner started; RSS %.1f MiB\n", float64(rss)/(1<<20))
		}
	}
	var cpuAtPVs time.Duration // the provisioning pipeline's cost, before binding's updates
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if sut != nil && cpuAtPVs == 0 && pvSeen >= cfg.Count {
			cpuAtPVs, _ = sut.cpu()
		}
		return bound >= cfg.Count, nil
	})
	progress.Finish()
	if err != nil {
		mu.Lock()
		fmt.Fprintf(out, "timed out: %d PVs, %d bound of %d\n", pvSeen, bound, cfg.Count)
		mu.Unlock()
	}

	mu.Lock()
	run, lastPV, lastBound := summarize(byUID, start)
	mu.Unlock()
	fmt.Fprintf(out, "\nclaims created in %s (%.0f/s)%s\n", report.Round(createDur), float64(cfg.Count)/createDur.Seconds(),
		map[bool]string{true: ", before the provisioner started", false: ""}[cfg.Precreate])
	fmt.Fprintf(out, "all %d PVs created after %s: %.1f PVs/s (the client limit alone allows it in %s at the soonest)\n",
		cfg.Count, report.Round(lastPV), float64(cfg.Count)/lastPV.Seconds(), report.Round(clientFloor(cfg)))
	fmt.Fprintf(out, "all %d claims Bound after %s: %.1f claims/s\n", cfg.Count, report.Round(lastBound), float64(cfg.Count)/lastBound.Seconds())
	run.WriteTable(out)
	res.ok, res.lastPV, res.lastBound = err == nil, lastPV, lastBound
	if sut != nil {
		cpu1, _ := sut.cpu()
		mib := func(field string) float64 { v, _ := sut.rss(field); return float64(v) / (1 << 20) }
		res.cpuAll, res.cpuAtPVs, res.peakRSS = cpu1-cpu0, max(cpuAtPVs-cpu0, 0), mib("VmHWM:")
		fmt.Fprintf(out, "provisioner CPU %.2f s until all Bound (%.2f s per 1000 provisions), of which %.2f s until all PVs were created\n",
			(cpu1 - cpu0).Seconds(), (cpu1-cpu0).Seconds()*1000/float64(cfg.Count), max(cpuAtPVs-cpu0, 0).Seconds())
		fmt.Fprintf(out, "provisioner peak RSS %.1f MiB (now %.1f MiB: %.1f anonymous, %.1f file-backed pages of the binary)\n",
			mib("VmHWM:"), mib("VmRSS:"), mib("RssAnon:"), mib("RssFile:"))
		if own, err := sut.ownTimes(); err == nil {
			fmt.Fprintln(out, own)
		}
	}
	file := "provision"
	if upstream != "" {
		file = "provision-upstream"
	}
	if err := run.WriteFiles(cfg.OutDir, file, fmt.Sprintf("%s: %d claims, latency from claim to PV and to Bound", name, cfg.Count), out); err != nil {
		return res, err
	}

	fmt.Fprintln(out, "cleaning up")
	delStart := time.Now()
	if err := cleanup(ctx, cs, ns, sut); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "cleanup (claims, PVs and volumes deleted) took %s\n", report.Round(time.Since(delStart)))
	return res, nil
}

func byUIDGet(m map[types.UID]*claimTimes, uid types.UID) *claimTimes {
	ct, ok := m[uid]
	if !ok {
		ct = &claimTimes{}
		m[uid] = ct
	}
	return ct
}

// summarize turns the timestamps into latencies from max(created, start): with
// --precreate the clock starts when the provisioner does.
func summarize(byUID map[types.UID]*claimTimes, start time.Time) (*report.Run, time.Duration, time.Duration) {
	run := &report.Run{Series: []string{"pvc_to_pv_created", "pvc_to_bound"}}
	var lastPV, lastBound time.Duration
	for _, ct := range byUID {
		if ct.created.IsZero() {
			continue
		}
		base := ct.created
		if start.After(base) {
			base = start
		}
		lat := func(t time.Time) time.Duration {
			if t.IsZero() {
				return -1
			}
			return max(t.Sub(base), 0)
		}
		run.Samples = append(run.Samples, report.Sample{Name: ct.name, Start: base.Sub(start), Values: []time.Duration{lat(ct.pvSeen), lat(ct.boundAt)}})
		if !ct.pvSeen.IsZero() {
			lastPV = max(lastPV, ct.pvSeen.Sub(start))
		}
		if !ct.boundAt.IsZero() {
			lastBound = max(lastBound, ct.boundAt.Sub(start))
		}
	}
	return run, lastPV, lastBound
}

func createClaims(ctx context.Context, cs kubernetes.Interface, ns, class string, n int, created func(types.UID, string, time.Time)) error {
	return report.Parallel(n, 32, func(i int) error {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%05d", i)},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &class,
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
			},
		}
		at := time.Now()
		out, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created(out.UID, out.Name, at)
		return nil
	})
}

func cleanup(ctx context.Context, cs kubernetes.Interface, ns string, sut *system) error {
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if sut == nil {
		return nil
	}
	// Wait for the provisioner to delete every volume, so the driver and cluster are clean.
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, pv := range pvs.Items {
			if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == sut.driver {
				return false, nil
			}
		}
		return true, nil
	})
}
