package driver

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
)

// The driver's request validation is fuzzed on what a CO or a hostile manifest controls:
// StorageClass parameters, capacity ranges, names, IDs and inline volume attributes.
// Longer runs: go test -run '^$' -fuzz '^FuzzCreateVolumeRequest$' -fuzztime 5m ./internal/component/driver

// FuzzCreateVolumeRequest checks the invariants of CreateVolume's validation: no panic, a
// size that is accepted is positive, block aligned, within the range and at most maxSize,
// and every refusal is one of the codes CSI allows for bad arguments.
func FuzzCreateVolumeRequest(f *testing.F) {
	f.Add(int64(0), int64(0), "dir", "", "pvc-1", "")
	f.Add(int64(math.MaxInt64), int64(0), "block", "xfs", "pvc-2", "snap")
	f.Add(int64(math.MaxInt64-4095), int64(math.MaxInt64), "dir", "ext4", "x", "")
	f.Add(int64(-1), int64(1), "block", "btrfs", "", "vol")
	f.Add(int64(1000), int64(999), "nfs", "ext4", "a/../../b", "")
	f.Fuzz(func(t *testing.T, req, lim int64, typ, fsType, name, source string) {
		if err := required("name", name); err != nil {
			wantRefusal(t, err, codes.InvalidArgument)
			return
		}
		params, err := parseParams(map[string]string{ParamType: typ, ParamFsType: fsType})
		if err != nil {
			wantRefusal(t, err, codes.InvalidArgument)
			return
		}
		size, err := volumeSize(&csi.CapacityRange{RequiredBytes: req, LimitBytes: lim}, minSize(params.typ, params.fsType))
		if err != nil {
			wantRefusal(t, err, codes.InvalidArgument, codes.OutOfRange)
			return
		}
		switch {
		case size <= 0 || size > maxSize || size%sizeAlign != 0:
			t.Fatalf("volumeSize(%d, %d) = %d: not a positive aligned size", req, lim, size)
		case size < req || (lim > 0 && size > lim):
			t.Fatalf("volumeSize(%d, %d) = %d: outside the range", req, lim, size)
		}
		var src *csi.VolumeContentSource
		if source != "" {
			src = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: source}}}
		}
		if _, _, err := contentSource(src); err != nil {
			wantRefusal(t, err, codes.InvalidArgument)
		}
	})
}

// FuzzEphemeralSize: the size attribute of an inline volume, which a pod's manifest sets,
// is refused with INVALID_ARGUMENT or OUT_OF_RANGE, or becomes a positive aligned size at
// most maxSize.
func FuzzEphemeralSize(f *testing.F) {
	for _, s := range []string{"32Mi", "8Ei", "1e30", "9223372036854775808", "-1", "0", "1.5", "100m", "1x", "", "1e-30", "1e1000000000000", "1e-999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, attr string) {
		size, err := ephemeralSize(map[string]string{ContextSize: attr}, volumeParams{typ: "dir"})
		if err != nil {
			wantRefusal(t, err, codes.InvalidArgument, codes.OutOfRange)
			return
		}
		if size <= 0 || size > maxSize || size%sizeAlign != 0 {
			t.Fatalf("size %q = %d bytes: not a positive aligned size", attr, size)
		}
	})
}

// FuzzValidID: an ID the CO sends is accepted only if it names one entry directly under a
// layout directory, never a path outside it.
func FuzzValidID(f *testing.F) {
	for _, s := range []string{"v-1", "..", ".", "../x", "a/b", "", "csi-0123", "x\x00y", strings.Repeat("a", 129), "..data"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if !backend.ValidID(id) {
			return
		}
		dir := "/state/volumes"
		p := filepath.Join(dir, id)
		if filepath.Dir(p) != dir || filepath.Base(p) != id {
			t.Fatalf("ValidID(%q) accepted an ID that resolves to %s", id, p)
		}
	})
}

func wantRefusal(t *testing.T, err error, allowed ...codes.Code) {
	t.Helper()
	for _, c := range allowed {
		if status.Code(err) == c {
			return
		}
	}
	t.Fatalf("refused with %v, want one of %v", err, allowed)
}
