package driver

import (
	"context"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/state"
)

func TestVolumeSize(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req, lim int64
		floor    int64
		want     int64
		code     codes.Code
	}{
		{"default", 0, 0, 4096, DefaultVolumeSize, codes.OK},
		{"default capped by limit", 0, 8192, 4096, 8192, codes.OK},
		{"exact", 10 << 30, 10 << 30, 4096, 10 << 30, codes.OK},
		{"rounded up", 1000, 0, 4096, 4096, codes.OK},
		{"floor", 1 << 20, 0, 300 << 20, 300 << 20, codes.OK},
		{"floor above limit", 1 << 20, 2 << 20, 300 << 20, 0, codes.OutOfRange},
		{"required above limit", 2, 1, 4096, 0, codes.OutOfRange},
		{"negative", -1, 0, 4096, 0, codes.InvalidArgument},
		// What a claim of 8Ei turns into: rounding it up used to wrap to a negative size.
		{"largest int64", math.MaxInt64, 0, 4096, 0, codes.OutOfRange},
		{"one byte above the largest size", maxSize + 1, 0, 4096, 0, codes.OutOfRange},
		{"largest size", maxSize, 0, 4096, maxSize, codes.OK},
		{"floor above the largest size", 1, 0, math.MaxInt64, 0, codes.OutOfRange},
	} {
		got, err := volumeSize(&csi.CapacityRange{RequiredBytes: tc.req, LimitBytes: tc.lim}, tc.floor)
		if status.Code(err) != tc.code || got != tc.want {
			t.Errorf("%s: volumeSize = %d, %v; want %d, %v", tc.name, got, err, tc.want, tc.code)
		}
	}
}

func TestParseParams(t *testing.T) {
	if p, err := parseParams(nil); err != nil || p.typ != "dir" {
		t.Errorf("defaults: %+v %v", p, err)
	}
	if p, err := parseParams(map[string]string{"type": "block", ParamFsType: "xfs"}); err != nil || p.typ != "block" || p.fsType != "xfs" {
		t.Errorf("block xfs: %+v %v", p, err)
	}
	for _, bad := range []map[string]string{{"type": "nfs"}, {"fsType": "btrfs"}} {
		if _, err := parseParams(bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("parseParams(%v) = %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

func TestUnsupportedReason(t *testing.T) {
	mode := func(m csi.VolumeCapability_AccessMode_Mode, block bool) *csi.VolumeCapability {
		c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: m}, AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
		if block {
			c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}
		return c
	}
	if r := unsupportedReason("dir", false, mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)); r != "" {
		t.Errorf("dir mount refused: %s", r)
	}
	if r := unsupportedReason("dir", false, mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, true)); r == "" {
		t.Error("dir raw block accepted")
	}
	if r := unsupportedReason("block", false, mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, true)); r != "" {
		t.Errorf("block raw refused: %s", r)
	}
	if r := unsupportedReason("block", false, mode(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false)); r == "" {
		t.Error("multi-node mode accepted for a local volume")
	}
	for typ, block := range map[string]bool{"dir": false, "block": true} {
		if r := unsupportedReason(typ, true, mode(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, block)); r != "" {
			t.Errorf("multi-node %s on a network volume refused: %s", typ, r)
		}
	}
	if r := unsupportedReason("block", true, mode(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false)); r == "" {
		t.Error("a filesystem on a network block volume accepted for several nodes")
	}
}

func TestPickNode(t *testing.T) {
	seg := func(n string) *csi.Topology { return &csi.Topology{Segments: map[string]string{TopologyKey: n}} }
	one := &Config{NodeID: "n1", StateDir: t.TempDir()}
	three := &Config{NodeID: "n1", StateDir: t.TempDir(), TopologyNodes: []string{"n2", "n3"}}
	for _, c := range []*Config{one, three} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		cfg    *Config
		req    *csi.TopologyRequirement
		want   string
		wantOK bool
	}{
		{one, nil, "n1", true},
		{one, &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("n2"), seg("n1")}}, "n1", true},
		{one, &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("n2")}}, "", false},
		{one, &csi.TopologyRequirement{Preferred: []*csi.Topology{seg("n2")}}, "n1", true},
		{three, nil, "n1", true},
		{three, &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("n1"), seg("n3")}, Preferred: []*csi.Topology{seg("n3"), seg("n1")}}, "n3", true},
		{three, &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("n4"), seg("n2")}, Preferred: []*csi.Topology{seg("n4")}}, "n2", true},
		{three, &csi.TopologyRequirement{Requisite: []*csi.Topology{seg("n4")}}, "", false},
	} {
		got, ok := tc.cfg.pickNode(tc.req)
		if ok != tc.wantOK || (ok && got != tc.want) {
			t.Errorf("nodes %v, %v: got %q, %v; want %q, %v", tc.cfg.TopologyNodes, tc.req, got, ok, tc.want, tc.wantOK)
		}
	}
	if !three.servesSegment("n3") || three.servesSegment("n4") {
		t.Errorf("served segments of %v", three.TopologyNodes)
	}
}

// --zone adds segments beside the node's to the node's topology and every local volume's; a
// key or value a node label cannot carry, or the node key itself, is refused.
func TestZone(t *testing.T) {
	c := &Config{NodeID: "n1", StateDir: t.TempDir(), Zone: map[string]string{"topology.ebs.csi.aws.com/zone": "us-east-1a"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{TopologyKey: "n2", "topology.ebs.csi.aws.com/zone": "us-east-1a"}
	if got := c.topologyOf("n2"); !maps.Equal(got, want) {
		t.Errorf("topologyOf(n2) = %v, want %v", got, want)
	}
	if got := c.topology()[TopologyKey]; got != "n1" {
		t.Errorf("node segment %q, want n1", got)
	}
	for _, zone := range []map[string]string{
		{TopologyKey: "x"}, {"bad key!": "x"}, {"topology.example.com/zone": ""}, {"topology.example.com/zone": "a/b"},
	} {
		bad := &Config{NodeID: "n1", StateDir: t.TempDir(), Zone: zone}
		if err := bad.Validate(); err == nil {
			t.Errorf("--zone %v validated", zone)
		}
	}
}

func TestPaginate(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	page, next, err := paginate(ids, "", 2)
	if err != nil || !slices.Equal(page, []string{"a", "b"}) || next == "" {
		t.Fatalf("first page: %v %q %v", page, next, err)
	}
	page, next2, err := paginate([]string{"a", "c", "d", "e"}, next, 0) // b deleted meanwhile
	if err != nil || !slices.Equal(page, []string{"c", "d", "e"}) || next2 != "" {
		t.Errorf("second page after a deletion: %v %q %v", page, next2, err)
	}
	if _, _, err := paginate(ids, "invalid-token", 0); status.Code(err) != codes.Aborted {
		t.Errorf("invalid token: %v, want ABORTED", err)
	}
}

func TestParseFaults(t *testing.T) {
	rules, err := ParseFaults("CreateVolume:error=RESOURCE_EXHAUSTED,rate=0.5; NodeStageVolume:delay=2s;*:hang;DeleteVolume:error=14,count=3;" +
		"CreateVolume:lose,rate=0.2;NodeStageVolume:lose,error=UNAVAILABLE,rate=0.1;DeleteVolume:hang,rate=0.05,delay=1s;NodePublishVolume:shadow")
	if err != nil {
		t.Fatal(err)
	}
	want := []FaultRule{
		{Method: "CreateVolume", Code: codes.ResourceExhausted, Rate: 0.5},
		{Method: "NodeStageVolume", Rate: 1, Delay: 2 * time.Second},
		{Method: "*", Rate: 1, Hang: true},
		{Method: "DeleteVolume", Code: codes.Unavailable, Rate: 1, Count: 3},
		{Method: "CreateVolume", Rate: 0.2, Lose: true},
		{Method: "NodeStageVolume", Code: codes.Unavailable, Rate: 0.1, Lose: true},
		{Method: "DeleteVolume", Rate: 0.05, Delay: time.Second, Hang: true},
		{Method: "NodePublishVolume", Rate: 1, Shadow: true},
	}
	if !slices.Equal(rules, want) {
		t.Errorf("got %+v\nwant %+v", rules, want)
	}
	for _, r := range rules {
		again, err := ParseFaults(r.String())
		if err != nil || len(again) != 1 || again[0] != r {
			t.Errorf("String() does not round-trip: %q -> %+v %v", r.String(), again, err)
		}
	}
	for _, bad := range []string{"CreateVolume", "CreateVolume:rate=0.5", "X:error=NOPE", "X:rate=2,error=INTERNAL", "X:delay=-1s", "X:color=red",
		"X:lose=maybe", "X:lose,hang", "X:lose=false", "CreateVolume:shadow"} {
		if _, err := ParseFaults(bad); err == nil {
			t.Errorf("ParseFaults(%q) accepted", bad)
		}
	}
}

func TestFaultsApply(t *testing.T) {
	f := newFaults([]FaultRule{{Method: "CreateVolume", Code: codes.Internal, Rate: 1, Count: 2}})
	ctx := context.Background()
	for i, want := range []codes.Code{codes.Internal, codes.Internal, codes.OK} {
		if _, err := f.apply(ctx, "CreateVolume", nil); status.Code(err) != want {
			t.Errorf("call %d: %v, want %v", i, err, want)
		}
	}
	if _, err := f.apply(ctx, "DeleteVolume", nil); err != nil {
		t.Errorf("unmatched method failed: %v", err)
	}
	hang := newFaults([]FaultRule{{Method: "*", Rate: 1, Hang: true}})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := hang.apply(cctx, "Probe", nil); status.Code(err) != codes.Canceled {
		t.Errorf("hang with a cancelled client: %v", err)
	}
}

func TestMountTableBinds(t *testing.T) {
	mt := mountTable{
		{Major: 254, Minor: 0, Root: "/", MountPoint: "/"},
		{Major: 0, Minor: 30, Root: "/", MountPoint: "/var/lib/kubevol"},
		{Major: 0, Minor: 30, Root: "/volumes/v-1", MountPoint: "/pods/a/mount"},
		{Major: 0, Minor: 30, Root: "/volumes/v-10", MountPoint: "/pods/b/mount"},
		{Major: 254, Minor: 0, Root: "/srv/volumes/v-1", MountPoint: "/pods/c/mount"},
		{Major: 0, Minor: 6, Root: "/loop3", Source: "devtmpfs", MountPoint: "/dev"},
		{Major: 7, Minor: 3, Root: "/", Source: "/dev/loop3", MountPoint: "/staging/x"},
	}
	if got := mt.bindsOf("/var/lib/kubevol/volumes/v-1"); !slices.Equal(got, []string{"/pods/a/mount"}) {
		t.Errorf("bindsOf = %v", got)
	}
	if got := mt.mountsOfDevice("/dev/loop3"); !slices.Equal(got, []string{"/staging/x"}) {
		t.Errorf("mountsOfDevice = %v", got)
	}
	if m := mt.at("/staging/x/"); m == nil || m.Source != "/dev/loop3" {
		t.Errorf("at = %v", m)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{NodeID: "n1", StateDir: "/tmp/x"}
	if err := good.Validate(); err != nil || good.DriverName != DefaultDriverName || good.Mode != ModeAll || good.Capacity != DefaultCapacity {
		t.Errorf("defaults: %+v %v", good, err)
	}
	for _, bad := range []Config{
		{StateDir: "/tmp/x"},
		{NodeID: "n1"},
		{NodeID: "n1", StateDir: "/x", Mode: "both"},
		{NodeID: "n1", StateDir: "/x", DriverName: "kubevol.io/local"},
		{NodeID: "n1", StateDir: "/x", MaxVolumesPerNode: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", bad)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	if p, err := ParseEndpoint("unix:///run/csi.sock"); err != nil || p != "/run/csi.sock" {
		t.Errorf("%q %v", p, err)
	}
	for _, bad := range []string{"tcp://127.0.0.1:10000", "unix://relative.sock", ""} {
		if _, err := ParseEndpoint(bad); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted", bad)
		}
	}
}

// A block image still being created or copied has nothing allocated under its final name:
// it must hold all its bytes, or two concurrent creates could both take the last space.
func TestPoolCountsImagesBeingCreated(t *testing.T) {
	p := &pool{fsPath: t.TempDir(), capacity: 100 << 20}
	empty, err := p.free(state.TypeBlock, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := p.free(state.TypeBlock, []hold{{bytes: 64 << 20, image: filepath.Join(p.fsPath, "v-new.img")}})
	if err != nil {
		t.Fatal(err)
	}
	// The host filesystem changes under other tests; a 64 MiB hold cannot be hidden by it.
	if empty-held < 32<<20 {
		t.Errorf("an image not yet created held %d bytes, want about %d", empty-held, 64<<20)
	}
	if free, _ := p.free(state.TypeDir, []hold{{bytes: math.MaxInt64}, {bytes: math.MaxInt64}}); free != 0 {
		t.Errorf("dir holds summing past int64 left %d bytes free", free)
	}
}

func TestValidateTopologyTwice(t *testing.T) {
	dir := t.TempDir()
	c := &Config{NodeID: "n2", StateDir: dir + "/n2", Mode: ModeNode, ControllerStateDir: dir + "/c"}
	for range 2 {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	ctrl := &Config{NodeID: "n1", StateDir: dir, Mode: ModeController, TopologyNodes: []string{"n2"}}
	for range 2 {
		if err := ctrl.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(ctrl.TopologyNodes, []string{"n1", "n2"}) {
		t.Errorf("TopologyNodes = %v", ctrl.TopologyNodes)
	}
	for _, bad := range []*Config{
		{NodeID: "n1", StateDir: dir, Mode: ModeController, ControllerStateDir: dir + "/c"},
		{NodeID: "n1", StateDir: dir, Mode: ModeNode, TopologyNodes: []string{"n2"}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func TestOtherNodesImage(t *testing.T) {
	records := map[string]*state.Volume{"v-a": {ID: "v-a", Node: "n1"}, "v-b": {ID: "v-b", Node: "n2"}, "v-old": {ID: "v-old"}}
	n := &node{cfg: &Config{NodeID: "n1"}, layout: controllerLayout("/s"), catalog: func(id string) *state.Volume { return records[id] }}
	for p, want := range map[string]bool{
		"/s/volumes/v-a.img":   false, // this node's
		"/s/volumes/v-b.img":   true,  // n2's, which holds its loop device
		"/s/volumes/v-old.img": false, // a record from before volumes had a node
		"/s/volumes/v-new.img": false, // no record: an orphan to detach
		"/e/ephemeral/v-b.img": false, // not a controller volume
	} {
		if got := n.otherNodesImage(p); got != want {
			t.Errorf("otherNodesImage(%s) = %v, want %v", p, got, want)
		}
	}
}
