package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/bench/target"
	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/cluster/proc"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/pkg/volumemanager"
)

// footprintPods is how many pods the footprint agent mounts: each projects a ConfigMap and a
// Secret of its own besides the benchmark's shared cfg and sec.
const footprintPods = 10

// footprint is one agent process's start-up time, peak RSS and watches.
type footprint struct {
	label          string
	startup        time.Duration
	peakRSS        int64 // bytes (VmHWM)
	watches        int
	wantWatches    int
	credential     string
	unrelatedCount int
}

// measureFootprints starts a `kubevol node` process on an empty cluster, then again once
// Unrelated Secrets and ConfigMaps of 1 KiB exist that none of its pods reference: its
// start-up and peak RSS must not grow with them, and its watches must equal the objects its
// pods reference.
func (b *bench) measureFootprints(ctx context.Context) ([]footprint, error) {
	if b.cfg.Unrelated == 0 {
		return nil, nil
	}
	empty, err := b.footprint(ctx, "empty cluster", 0)
	if err != nil {
		return nil, err
	}
	if err := b.createUnrelated(ctx); err != nil {
		return nil, err
	}
	loaded, err := b.footprint(ctx, fmt.Sprintf("+%d Secrets, +%d ConfigMaps", b.cfg.Unrelated, b.cfg.Unrelated), b.cfg.Unrelated)
	if err != nil {
		return nil, err
	}
	return []footprint{empty, loaded}, nil
}

func (b *bench) createUnrelated(ctx context.Context) error {
	ns := b.ns + "-unrelated"
	if _, err := b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	b.extraNamespaces = append(b.extraNamespaces, ns)
	kib := strings.Repeat("x", 1024)
	n := b.cfg.Unrelated
	prog := report.NewProgress(b.out, "creating unrelated objects", 2*n)
	defer prog.Finish()
	done := 0
	return parallel(ctx, 2*n, 64, func(i int) error {
		var err error
		if i%2 == 0 {
			_, err = b.cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%06d", i/2)},
				Data: map[string][]byte{"k": []byte(kib)}}, metav1.CreateOptions{})
		} else {
			_, err = b.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%06d", i/2)},
				Data: map[string]string{"k": kib}}, metav1.CreateOptions{})
		}
		b.mu.Lock()
		done++
		prog.Set(done)
		b.mu.Unlock()
		return err
	})
}

// footprint runs one agent process for a fresh node, mounts footprintPods pods on it, reads
// its peak RSS and watches, and stops it.
func (b *bench) footprint(ctx context.Context, label string, unrelated int) (footprint, error) {
	fp := footprint{label: label, unrelatedCount: unrelated}
	node := fmt.Sprintf("%s-fp%d", b.node, len(b.extraNodes))
	b.extraNodes = append(b.extraNodes, node)
	kubeconfig, credential := b.cluster.Kubeconfig, "admin (no cluster CA at hand)"
	if b.cluster.NodeKubeconfig != nil {
		kc, err := b.cluster.NodeKubeconfig(node)
		if err != nil {
			return fp, err
		}
		kubeconfig, credential = kc, "system:node:"+node
	}
	fp.credential = credential
	root, err := os.MkdirTemp("", "kubevol-bench-footprint-")
	if err != nil {
		return fp, err
	}
	defer func() {
		if len(kubecheck.MountsUnder(root)) == 0 {
			_ = os.RemoveAll(root)
		}
	}()
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		return fp, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	self, err := os.Executable()
	if err != nil {
		return fp, err
	}
	start := time.Now()
	p, err := proc.Start("kubevol node", self, []string{"node", "--kubeconfig", kubeconfig, "--node-name", node,
		"--root-dir", root, "--metrics-address", addr}, filepath.Join(root+".log"))
	if err != nil {
		return fp, err
	}
	defer func() {
		_ = p.Stop(30 * time.Second)
		_ = os.Remove(root + ".log")
	}()
	// Start-up: process start to /healthz, which answers once the volume manager has its
	// pods and its state reconstructed.
	if err := proc.WaitReady(ctx, p, 2*time.Minute, proc.HTTPOK("http://"+addr+"/healthz")); err != nil {
		return fp, fmt.Errorf("footprint agent: %w (log %s.log)", err, root)
	}
	fp.startup = time.Since(start)

	ns := b.ns
	var names []string
	referenced := map[string]bool{}
	for i := range footprintPods {
		name := fmt.Sprintf("fp%d-%02d", len(b.extraNodes), i)
		names = append(names, name)
		if _, err := b.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			return fp, err
		}
		if _, err := b.cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{}); err != nil {
			return fp, err
		}
		pod := b.podSpec(i)
		pod.Name = name
		pod.Spec.SchedulerName = ""
		pod.Spec.NodeName = node
		pod.Spec.Volumes = append(pod.Spec.Volumes,
			corev1.Volume{Name: "own-cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}},
			corev1.Volume{Name: "own-sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: "own-cm", MountPath: "/own-cm"}, corev1.VolumeMount{Name: "own-sec", MountPath: "/own-sec"})
		for _, r := range volumemanager.PodObjects(pod) {
			referenced[string(r.Kind)+"/"+r.Namespace+"/"+r.Name] = true
		}
		if _, err := b.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fp, err
		}
	}
	fp.wantWatches = len(referenced)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, b.cfg.Timeout, true, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			pod, err := b.cs.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil || !VolumesReady(pod) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fp, fmt.Errorf("footprint pods not mounted: %w (log %s.log)", err, root)
	}
	if fp.watches, err = scrapeWatches(ctx, "http://"+addr+"/metrics"); err != nil {
		return fp, err
	}
	usage, err := proc.ReadUsage(p.PID())
	if err != nil {
		return fp, err
	}
	fp.peakRSS = usage.PeakRSS
	// Pods go while the agent runs, so it tears their volumes down.
	for _, n := range names {
		_ = b.cs.CoreV1().Pods(ns).Delete(ctx, n, metav1.DeleteOptions{})
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, b.cfg.Timeout, true, func(ctx context.Context) (bool, error) {
		l, err := b.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil {
		return fp, fmt.Errorf("footprint pods not torn down: %w", err)
	}
	if leaked := kubecheck.MountsUnder(root); len(leaked) > 0 {
		return fp, fmt.Errorf("%d mounts left under %s", len(leaked), root)
	}
	return fp, nil
}

// scrapeWatches sums volume_manager_object_watches over its kinds.
func scrapeWatches(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	total, found := 0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "volume_manager_object_watches{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, err
		}
		total += int(v)
		found = true
	}
	if !found {
		return 0, errors.New("no volume_manager_object_watches in " + url)
	}
	return total, sc.Err()
}

func writeFootprints(out io.Writer, fps []footprint) {
	if len(fps) == 0 {
		return
	}
	fmt.Fprintf(out, "\nagent footprint (%d pods, credential %s)\n", footprintPods, fps[0].credential)
	fmt.Fprintf(out, "%-32s %10s %10s %8s %8s\n", "cluster", "start-up", "peak RSS", "watches", "want")
	for _, fp := range fps {
		fmt.Fprintf(out, "%-32s %10s %8.1fMi %8d %8d\n", fp.label, fp.startup.Round(time.Millisecond), float64(fp.peakRSS)/(1<<20), fp.watches, fp.wantWatches)
	}
	if len(fps) == 2 && fps[0].peakRSS > 0 && fps[0].startup > 0 {
		fmt.Fprintf(out, "with the unrelated objects: start-up %+.1f%%, peak RSS %+.1f%%\n",
			100*(fps[1].startup.Seconds()/fps[0].startup.Seconds()-1), 100*(float64(fps[1].peakRSS)/float64(fps[0].peakRSS)-1))
	}
}

// nodeClient is a client for system:node:<node>, without client-side throttling, as the
// benchmark's own.
func nodeClient(c *target.Cluster, node string) (kubernetes.Interface, error) {
	kc, err := c.NodeKubeconfig(node)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 2000, 4000
	return kubernetes.NewForConfig(cfg)
}
