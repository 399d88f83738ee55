package snapshotter

import (
	"context"

	snapinformers "github.com/kubernetes-csi/external-snapshotter/client/v8/informers/externalversions"

	"github.com/kubevol/kubevol/internal/runtime/controller"
)

// Informers is the controller.Source of a snapshot informer factory (the generated factory
// of the snapshot API has no context-taking methods).
func Informers(f snapinformers.SharedInformerFactory) controller.Source { return snapSource{f} }

type snapSource struct {
	f snapinformers.SharedInformerFactory
}

func (s snapSource) Start(ctx context.Context) { s.f.Start(ctx.Done()) }

func (s snapSource) WaitForSync(ctx context.Context) bool {
	for _, ok := range s.f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return false
		}
	}
	return true
}

func (s snapSource) Shutdown() { s.f.Shutdown() }
