package sidecar

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/apicheck"
)

// CheckAPIs asks the apiserver which of the APIs the sidecar uses it serves
// (internal/apicheck) and logs the one line that names the features turned off; it fails,
// naming the API, when a required one is missing.
func (s *Sidecar) CheckAPIs(ctx context.Context, component string, required []apicheck.Resource, features ...apicheck.Feature) (apicheck.Result, error) {
	res, err := apicheck.Check(s.Client.Discovery(), component, required, features)
	if err != nil {
		return res, err
	}
	klog.FromContext(ctx).Info(res.Line(component))
	return res, nil
}
