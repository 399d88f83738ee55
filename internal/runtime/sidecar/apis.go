package sidecar

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/apicheck"
)

// apiWaitLog is how often a sidecar that cannot reach the apiserver's discovery says so.
const apiWaitLog = 10 * time.Second

// CheckAPIs asks the apiserver which of the APIs the sidecar uses it serves
// (internal/runtime/apicheck) and logs the one line that names the features turned off; it fails,
// naming the API, when a required one is missing. While discovery fails (an apiserver not
// up yet, or restarting), it waits and says so every 10 s, as upstream's sidecars wait for
// the apiserver instead of exiting.
func (s *Sidecar) CheckAPIs(ctx context.Context, component string, required []apicheck.Resource, features ...apicheck.Feature) (apicheck.Result, error) {
	var res apicheck.Result
	var last error
	var logged time.Time
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		r, err := apicheck.Check(s.Client.Discovery(), component, required, features)
		var notServed *apicheck.NotServedError
		switch {
		case err == nil:
			res = r
			return true, nil
		case errors.As(err, &notServed):
			return false, err
		}
		last = err
		if time.Since(logged) >= apiWaitLog {
			logged = time.Now()
			klog.FromContext(ctx).Info("Waiting for the apiserver's discovery", "err", err)
		}
		return false, nil
	})
	if err != nil {
		if last != nil && ctx.Err() != nil {
			return res, last
		}
		return res, err
	}
	klog.FromContext(ctx).Info(res.Line(component))
	return res, nil
}
