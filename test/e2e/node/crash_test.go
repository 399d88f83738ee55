package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubevol/kubevol/internal/kubecheck"
)

// kill -9 the agent at least 10 times while 100 pods are created and deleted. After it
// converges: no mount leaked, no wanted volume was unmounted (its tmpfs keeps its mount
// ID), and the data written into live pods' memory emptyDirs is intact.
func TestCrashStorm(t *testing.T) {
	t.Parallel()
	const pods, minKills = 100, 10
	a := startAgent(t)
	ctx := a.ctx(10 * time.Minute)
	_, err := a.client.CoreV1().ConfigMaps(a.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	mustf(t, err, "configmap")
	_, err = a.client.CoreV1().Secrets(a.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{})
	mustf(t, err, "secret")

	var mu sync.Mutex
	live := map[string]types.UID{} // created and not deleted
	written := map[types.UID]int{} // pod → mount ID of its memory emptyDir when data was written
	deleted := map[string]bool{}

	stormDone := make(chan struct{})
	go func() {
		defer close(stormDone)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < pods; i++ {
			name := fmt.Sprintf("p%03d", i)
			p := a.pod(name,
				corev1.Volume{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
				corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
				corev1.Volume{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec"}}},
			)
			created, err := a.client.CoreV1().Pods(a.ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("create %s: %v", name, err)
				return
			}
			mu.Lock()
			live[name] = created.UID
			// Delete a random earlier pod about every third step.
			if i%3 == 2 {
				names := make([]string, 0, len(live))
				for n := range live {
					names = append(names, n)
				}
				victim := names[rng.IntN(len(names))]
				delete(live, victim)
				deleted[victim] = true
				mu.Unlock()
				if err := a.client.CoreV1().Pods(a.ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("delete %s: %v", victim, err)
				}
			} else {
				mu.Unlock()
			}
			time.Sleep(time.Duration(20+rng.IntN(60)) * time.Millisecond)
		}
	}()

	// Write data into each live pod's memory emptyDir as soon as it is mounted, and
	// remember the tmpfs mount ID.
	writerDone := make(chan struct{})
	stopWriter := make(chan struct{})
	go func() {
		defer close(writerDone)
		for {
			select {
			case <-stopWriter:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ids := kubecheck.MountIDs(a.root)
			mu.Lock()
			for _, uid := range live {
				if _, ok := written[uid]; ok {
					continue
				}
				dir := filepath.Join(a.root, "pods", string(uid), "volumes", "kubernetes.io~empty-dir", "mem")
				id, mounted := ids[dir]
				if !mounted {
					continue
				}
				if err := os.WriteFile(filepath.Join(dir, "data"), []byte(uid), 0o644); err == nil {
					written[uid] = id
				}
			}
			mu.Unlock()
		}
	}()

	kills := 0
	rng := rand.New(rand.NewPCG(3, 4))
	for stormRunning := true; stormRunning || kills < minKills; {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		a.proc.Kill()
		kills++
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		a.proc.Start()
		select {
		case <-stormDone:
			stormRunning = false
		default:
		}
	}
	t.Logf("killed the agent %d times during the storm", kills)

	// Converge: every live pod ready, every deleted pod gone.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := a.client.CoreV1().Pods(a.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if len(l.Items) != len(live) {
			return false, nil
		}
		for _, p := range l.Items {
			if !volumesReady(&p) || live[p.Name] != p.UID {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("did not converge after the storm: %v", err)
	}
	close(stopWriter)
	<-writerDone

	ids := kubecheck.MountIDs(a.root)
	mu.Lock()
	defer mu.Unlock()
	if len(written) < 10 {
		t.Errorf("only %d pods got data written; the storm proves little", len(written))
	}
	checked := 0
	for name, uid := range live {
		id, ok := written[uid]
		if !ok {
			continue
		}
		checked++
		dir := filepath.Join(a.root, "pods", string(uid), "volumes", "kubernetes.io~empty-dir", "mem")
		if got := ids[dir]; got != id {
			t.Errorf("pod %s: memory emptyDir was remounted (mount ID %d, was %d): a wanted volume was unmounted", name, got, id)
		}
		if data, err := os.ReadFile(filepath.Join(dir, "data")); err != nil || string(data) != string(uid) {
			t.Errorf("pod %s: data lost: %q %v", name, data, err)
		}
	}
	// Every mount under the root belongs to a live pod.
	liveUIDs := map[string]bool{}
	for _, uid := range live {
		liveUIDs[string(uid)] = true
	}
	for _, mp := range kubecheck.MountsUnder(a.root) {
		rel, _ := filepath.Rel(filepath.Join(a.root, "pods"), mp)
		if uid := firstElem(rel); !liveUIDs[uid] {
			t.Errorf("mount %s belongs to no live pod", mp)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(a.root, "pods"))
	if len(entries) != len(live) {
		t.Errorf("%d pod directories for %d live pods", len(entries), len(live))
	}
	t.Logf("%d live pods, %d deleted, data checked in %d", len(live), len(deleted), checked)
	// The cleanup deletes the rest and fails on any mount left under the root.
}

func firstElem(rel string) string {
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' {
			return rel[:i]
		}
	}
	return rel
}
