package nodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/mount-utils"

	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/kubecheck"
)

// cleanup deletes everything the run created, whether it completed, failed or was
// interrupted (it does not use the run's context): the pods first, while the agents run, so
// that they tear the volumes down and complete the deletions; then the agents; whatever
// mount is left (an agent that never started, or failed), unmounted here and reported; the
// Nodes, their CSINodes, the CSRs filed with the run's token, the token and the bindings it
// needed, and the namespace.
func (r *run) cleanup() error {
	timeout := 2*time.Minute + time.Duration(len(r.pods))*20*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	pods := r.cs.CoreV1().Pods(r.ns)
	if err := r.deletePods(ctx, nil); err != nil {
		errs = append(errs, fmt.Errorf("delete pods: %w", err))
	}
	if r.fleet != nil && len(r.pods) > 0 {
		prog := report.NewProgress(r.out, "tearing down", len(r.pods))
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout/2, true, func(ctx context.Context) (bool, error) {
			l, err := pods.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				return false, nil
			}
			prog.Set(len(r.pods) - len(l.Items))
			return len(l.Items) == 0, nil
		})
		prog.Finish()
		if err != nil {
			errs = append(errs, fmt.Errorf("the agents did not tear every pod down: %w", err))
		}
	}
	if r.fleet != nil {
		if err := r.fleet.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	// Pods no agent completed (it never ran, or failed) would block the namespace.
	_ = r.deletePods(ctx, new(int64(0)))
	if r.stopWatch != nil {
		r.stopWatch()
	}
	if left := kubecheck.MountsUnder(r.dir); len(left) > 0 {
		errs = append(errs, fmt.Errorf("%d mounts were left under %s, unmounted by the benchmark", len(left), r.dir))
		m := mount.New("")
		for _, p := range slices.Backward(left) {
			if err := m.Unmount(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(kubecheck.MountsUnder(r.dir)) == 0 {
		_ = os.RemoveAll(r.dir)
	}
	errs = append(errs, r.deleteClusterObjects(ctx))
	return errors.Join(errs...)
}

// deleteClusterObjects deletes the cluster-scoped objects of the run, ignoring those that
// are gone. A Node's Lease goes with it (its owner reference).
func (r *run) deleteClusterObjects(ctx context.Context) error {
	var errs []error
	ignore := func(err error) {
		if err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	_ = report.Parallel(len(r.nodes), 32, func(i int) error {
		err1 := r.cs.CoreV1().Nodes().Delete(ctx, r.nodes[i], metav1.DeleteOptions{})
		err2 := r.cs.StorageV1().CSINodes().Delete(ctx, r.nodes[i], metav1.DeleteOptions{})
		r.mu.Lock()
		ignore(err1)
		ignore(err2)
		r.mu.Unlock()
		return nil
	})
	if r.token.ID != "" {
		csrs, err := r.cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		ignore(err)
		if err == nil {
			for _, c := range csrs.Items {
				if c.Spec.Username == r.token.Username() {
					ignore(r.cs.CertificatesV1().CertificateSigningRequests().Delete(ctx, c.Name, metav1.DeleteOptions{}))
				}
			}
		}
		ignore(r.cs.CoreV1().Secrets("kube-system").Delete(ctx, r.token.SecretName(), metav1.DeleteOptions{}))
	}
	for _, b := range r.token.Bindings {
		ignore(r.cs.RbacV1().ClusterRoleBindings().Delete(ctx, b, metav1.DeleteOptions{}))
	}
	ignore(r.cs.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{}))
	return errors.Join(errs...)
}

// deletePods deletes every pod of the run's namespace, 32 at a time, with grace (nil: the
// pod's own). Not DeleteCollection: kube-apiserver deletes a collection's items one after
// the other (--delete-collection-workers 1 by default) within one request's timeout; at
// 1000 nodes × 20 pods, on the loaded 2-core machine, it marked about 6,700 of 20,000 pods
// in the cleanup's 8 minutes and then timed out, so the agents had nothing to tear down.
func (r *run) deletePods(ctx context.Context, grace *int64) error {
	pods := r.cs.CoreV1().Pods(r.ns)
	l, err := pods.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var errs []error
	_ = report.Parallel(len(l.Items), 32, func(i int) error {
		err := pods.Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{GracePeriodSeconds: grace})
		if err != nil && !isNotFound(err) {
			mu.Lock()
			if len(errs) < 3 {
				errs = append(errs, err)
			}
			mu.Unlock()
		}
		return nil
	})
	return errors.Join(errs...)
}
