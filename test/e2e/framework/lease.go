package framework

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// WaitLeaseHolder waits up to a minute until the Lease ns/name has a holder other than not
// ("" for any) and returns it.
func WaitLeaseHolder(ctx context.Context, cs kubernetes.Interface, ns, name, not string) (string, error) {
	var holder string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return holder != "" && holder != not, nil
	})
	return holder, err
}
