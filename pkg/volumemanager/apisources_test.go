package volumemanager

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func TestRetryRefused(t *testing.T) {
	ctx := context.Background()
	forbidden := apierrors.NewForbidden(v1.Resource("configmaps"), "cfg", nil)

	// Refused until the node graph catches up, then served: the caller sees the answer.
	calls := 0
	got, err := retryRefused(ctx, time.Minute, func() (string, error) {
		calls++
		if calls < 3 {
			return "", forbidden
		}
		return "listed", nil
	})
	if err != nil || got != "listed" || calls != 3 {
		t.Fatalf("got %q, %v after %d calls; want the third call's answer", got, err, calls)
	}

	// Any other error is the reflector's to handle, at once.
	calls = 0
	_, err = retryRefused(ctx, time.Minute, func() (string, error) {
		calls++
		return "", apierrors.NewNotFound(v1.Resource("configmaps"), "cfg")
	})
	if !apierrors.IsNotFound(err) || calls != 1 {
		t.Fatalf("%v after %d calls; want NotFound after one", err, calls)
	}

	// Refused for good: handed back once the limit would be passed.
	calls = 0
	_, err = retryRefused(ctx, 250*time.Millisecond, func() (string, error) {
		calls++
		return "", forbidden
	})
	if !apierrors.IsForbidden(err) || calls < 2 || calls > 3 {
		t.Fatalf("%v after %d calls; want Forbidden after 2 (100 ms, then 200 ms would pass 250 ms)", err, calls)
	}

	// A cancelled context stops the retries.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls = 0
	_, err = retryRefused(cctx, time.Minute, func() (string, error) {
		calls++
		return "", forbidden
	})
	if !apierrors.IsForbidden(err) || calls != 1 {
		t.Fatalf("%v after %d calls; want Forbidden after one with the context cancelled", err, calls)
	}
}
