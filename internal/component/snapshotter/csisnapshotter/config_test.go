package csisnapshotter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubevol/kubevol/internal/component/snapshotter"
	"github.com/kubevol/kubevol/internal/component/snapshotter/csisnapshotter"
)

// A sidecar with NodeName (upstream --node-deployment) asks the API server only for the
// contents, single and group, labelled with its node, and for every class; without
// NodeName, for every content.
func TestSidecarInformersOfANode(t *testing.T) {
	for _, tc := range []struct{ node, want string }{
		{"n1", snapshotter.LabelManagedBy + "=n1"},
		{"", ""},
	} {
		t.Run("node "+tc.node, func(t *testing.T) {
			//lint:ignore SA1019 the snapshot client module generates no apply configurations, so it has no NewClientset
			snap := snapfake.NewSimpleClientset()
			var mu sync.Mutex
			selectors := map[string]string{} // resource: label selector of its list or watch
			snap.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				selectors[a.GetResource().Resource] = a.(k8stesting.ListAction).GetListRestrictions().Labels.String()
				return false, nil, nil
			})
			snap.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
				mu.Lock()
				defer mu.Unlock()
				selectors[a.GetResource().Resource] = a.(k8stesting.WatchAction).GetWatchRestrictions().Labels.String()
				return false, nil, nil
			})
			cfg := &csisnapshotter.Config{Snap: snap, NodeName: tc.node}
			contents, classes, sources := cfg.Informers()
			_ = contents.Snapshot().V1().VolumeSnapshotContents().Informer()
			_ = contents.Groupsnapshot().V1().VolumeGroupSnapshotContents().Informer()
			_ = classes.Snapshot().V1().VolumeSnapshotClasses().Informer()
			ctx, cancel := context.WithCancel(context.Background())
			defer func() { cancel(); contents.Shutdown(); classes.Shutdown() }()
			for _, s := range sources {
				s.Start(ctx)
			}
			want := map[string]string{"volumesnapshotcontents": tc.want, "volumegroupsnapshotcontents": tc.want, "volumesnapshotclasses": ""}
			err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				return len(selectors) == len(want), nil
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Fatalf("asked for %v, want %v", selectors, want)
			}
			for res, sel := range want {
				if selectors[res] != sel {
					t.Errorf("%s asked for with label selector %q, want %q", res, selectors[res], sel)
				}
			}
		})
	}
}
