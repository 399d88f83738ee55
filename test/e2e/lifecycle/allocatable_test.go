package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// With CSIDriver.spec.nodeAllocatableUpdatePeriodSeconds the agent asks the driver for
// NodeGetInfo again at that period and writes a changed max_volumes_per_node to the
// CSINode's allocatable count (the kubelet's mutable CSINode allocatable count).
func TestAllocatableCountRefreshed(t *testing.T) {
	t.Parallel()
	countFile := filepath.Join(t.TempDir(), "max-volumes")
	if err := os.WriteFile(countFile, []byte("5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{
		csiDriver:  func(s *storagev1.CSIDriverSpec) { s.NodeAllocatableUpdatePeriodSeconds = ptr(int64(10)) },
		driverArgs: []string{"--max-volumes-per-node-file", countFile},
	})
	e.waitRegistered()
	count := func(want int32) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			cn, err := e.cs.StorageV1().CSINodes().Get(ctx, e.node, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, d := range cn.Spec.Drivers {
				if d.Name == e.name && d.Allocatable != nil && d.Allocatable.Count != nil && *d.Allocatable.Count == want {
					return true, nil
				}
			}
			return false, nil
		}
	}
	e.poll("allocatable count 5 at registration", count(5))
	if err := os.WriteFile(countFile, []byte("7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.poll("allocatable count 7 after the driver's NodeGetInfo changed", count(7))
}
