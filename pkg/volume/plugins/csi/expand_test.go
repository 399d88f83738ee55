package csi

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
)

// NodeExpandVolume carries the size in whole bytes; a size CSI cannot carry is OutOfRange
// (infeasible for the volume manager) without a call, never a wrapped or zero size.
func TestNodeExpandSize(t *testing.T) {
	f := newFixture(t)
	if err := f.plugin.NodeExpand(context.Background(), pvSpec(), "pod-1", resource.MustParse("1.5Gi")); err != nil {
		t.Fatal(err)
	}
	calls := f.node.taken()
	if len(calls) != 1 || calls[0].(*csipb.NodeExpandVolumeRequest).GetCapacityRange().GetRequiredBytes() != 3<<29 {
		t.Fatalf("calls %v, want one NodeExpandVolume of 1.5Gi", calls)
	}
	for _, size := range []string{"8Ei", "1e30", "9223372036854775808"} {
		err := f.plugin.NodeExpand(context.Background(), pvSpec(), "pod-1", resource.MustParse(size))
		if status.Code(err) != codes.OutOfRange {
			t.Errorf("%s: error %v, want OutOfRange", size, err)
		}
		if calls := f.node.taken(); len(calls) != 0 {
			t.Errorf("%s: NodeExpandVolume called with %v", size, calls)
		}
	}
}
