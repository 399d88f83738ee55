package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/pkg/podstatus"
)

// Propagation updates ConfigMap namespace/name (data {"version": "<n>"}) updates times and
// times, for each of dirs (configMap volume directories of that ConfigMap), when its files
// show the new version: inotify on the directory, where the writer swaps ..data. It waits
// for every directory before the next update, up to timeout for each.
func Propagation(ctx context.Context, cs kubernetes.Interface, namespace, name string, dirs []string, updates int, timeout time.Duration, out io.Writer) (*report.Run, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	index := map[string]int{}
	for i, dir := range dirs {
		if err := w.Add(dir); err != nil {
			return nil, fmt.Errorf("watch %s: %w", dir, err)
		}
		index[dir] = i
	}
	run := &report.Run{Series: []string{"configmap_update"}}
	prog := report.NewProgress(out, "configMap updates", updates)
	start := time.Now()
	for u := 1; u <= updates; u++ {
		version := fmt.Sprint(u)
		seen := make([]bool, len(dirs))
		left := len(dirs)
		t0 := time.Now()
		_, err := cs.CoreV1().ConfigMaps(namespace).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"version": version}}, metav1.UpdateOptions{})
		if err != nil {
			return nil, err
		}
		deadline := time.After(timeout)
		check := func(i int) {
			if data, err := os.ReadFile(filepath.Join(dirs[i], "version")); err == nil && string(data) == version {
				seen[i] = true
				left--
				run.Samples = append(run.Samples, report.Sample{Name: fmt.Sprintf("%d/%d", i, u), Start: t0.Sub(start), Values: []time.Duration{time.Since(t0)}})
			}
		}
		rescan := time.NewTicker(time.Second)
		for left > 0 {
			select {
			case ev := <-w.Events:
				i, ok := index[filepath.Dir(ev.Name)]
				if ok && !seen[i] && filepath.Base(ev.Name) == "..data" {
					check(i)
				}
			case <-rescan.C:
				// Events lost to a full inotify queue (thousands of volumes change at
				// once): what the files show now, a little later than it happened.
				for i := range dirs {
					if !seen[i] {
						check(i)
					}
				}
			case err := <-w.Errors:
				if !errors.Is(err, fsnotify.ErrEventOverflow) {
					rescan.Stop()
					return nil, err
				}
			case <-deadline:
				rescan.Stop()
				return nil, fmt.Errorf("update %d reached %d of %d volumes within %s", u, len(dirs)-left, len(dirs), timeout)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		rescan.Stop()
		prog.Set(u)
		time.Sleep(100 * time.Millisecond)
	}
	prog.Finish()
	return run, nil
}

// BindAll binds every pod to node(i), all at once (64 at a time), calls bound(i, t) with
// the time each Bind returned, and waits until ready() reaches len(pods) (readyCh wakes it
// up) and every Bind has returned, or timeout passes; prog shows ready().
func BindAll(ctx context.Context, cs kubernetes.Interface, pods []*corev1.Pod, node func(i int) string, bound func(i int, at time.Time),
	ready func() int, readyCh <-chan struct{}, timeout time.Duration, prog *report.Progress) error {
	n := len(pods)
	bindErr := make(chan error, 1)
	go func() {
		bindErr <- report.Parallel(n, 64, func(i int) error {
			p := pods[i]
			err := cs.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: node(i)},
			}, metav1.CreateOptions{})
			bound(i, time.Now())
			return err
		})
	}()
	deadline := time.After(timeout)
	for {
		done := ready()
		prog.Set(done)
		if done >= n && bindErr == nil {
			prog.Finish()
			return nil
		}
		select {
		case err := <-bindErr:
			if err != nil {
				return fmt.Errorf("bind: %w", err)
			}
			bindErr = nil
		case <-readyCh:
		case <-time.After(time.Second):
		case <-deadline:
			return fmt.Errorf("only %d of %d pods had their volumes mounted after %s", done, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// VolumesReady reports the pod's kubevol.io/VolumesReady condition.
func VolumesReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == podstatus.VolumesReadyCondition {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
