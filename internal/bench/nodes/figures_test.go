package nodes

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kubevol/kubevol/internal/cluster/proc"
)

func snap(at time.Duration, cpu time.Duration, rssMiB int64, watches map[string]int) apiSnapshot {
	return apiSnapshot{at: time.Unix(0, 0).Add(at), usage: proc.Usage{CPU: cpu, RSS: rssMiB << 20}, local: true, watches: watches, registered: -1}
}

func TestFiguresPerNode(t *testing.T) {
	base := map[string]int{"pods": 3}
	idle := map[string]int{"pods": 13, "configmaps": 10, "secrets": 10, "csidrivers": 10}
	m := &measured{
		nodes: 10, podsPerNode: 20, expectedWatches: 4, load: 1.5,
		// The idle API server uses 0.1 core.
		base0: snap(0, 0, 100, base), base1: snap(10*time.Second, time.Second, 100, base),
		// Agents start in 10 s: 1 s idle + 2 s theirs.
		started: snap(20*time.Second, 4*time.Second, 110, base),
		// Binding and mounting in 5 s: 0.5 s idle + 5 s theirs.
		bound0: snap(30*time.Second, 5*time.Second, 120, base), mounted: snap(35*time.Second, 10500*time.Millisecond, 150, idle),
		// Idle with everything: 0.3 core over 10 s, i.e. 0.2 core beyond idle.
		idle0: snap(40*time.Second, 11*time.Second, 150, idle), idle1: snap(50*time.Second, 14*time.Second, 160, idle),
		agents0: proc.Usage{CPU: 2 * time.Second}, agents1: proc.Usage{CPU: 2*time.Second + 100*time.Millisecond, RSS: 250 << 20},
		agentsBaseRSS: 50 << 20,
		mounts:        []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second},
		propagation:   []time.Duration{100 * time.Millisecond, 300 * time.Millisecond},
	}
	got := m.figures()
	want := []float64{
		0.2, // (3 s − 1 s) / 10
		0.5, // (5.5 s − 0.5 s) / 10
		20,  // 200 millicores / 10
		6,   // 60 MiB / 10
		4,   // 40 watches / 10
		4,   // expected
		20,  // 200 MiB / 10
		1,   // 100 ms over 10 s = 10 millicores / 10
		2,   // p50 (nearest rank)
		4,   // p99
		0.3, // propagation p99
		1.5, // load
	}
	if len(got) != len(Series) || len(want) != len(Series) {
		t.Fatalf("%d figures, %d series", len(got), len(Series))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("%s = %v, want %v", Series[i], got[i], want[i])
		}
	}
	var out bytes.Buffer
	m.write(&out, AgentsProcess)
	for _, s := range []string{"configmaps +10, csidrivers +10, pods +10, secrets +10", "= 4.00 per node; expected 4 per node", "p50 2s, p99 4s"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
}

func TestFiguresRemoteAPIServer(t *testing.T) {
	m := &measured{nodes: 2, base0: apiSnapshot{}, idle1: apiSnapshot{}}
	f := m.figures()
	for i := range 4 {
		if !math.IsNaN(f[i]) {
			t.Errorf("%s = %v for an API server not on this machine, want NaN", Series[i], f[i])
		}
	}
	if !math.IsNaN(f[10]) {
		t.Errorf("configmap p99 = %v without updates, want NaN", f[10])
	}
}

func TestParseWatches(t *testing.T) {
	metrics := `# HELP apiserver_longrunning_requests [STABLE] Gauge of all active long-running apiserver requests
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 5
apiserver_longrunning_requests{component="apiserver",group="",resource="secrets",scope="resource",subresource="",verb="WATCH",version="v1"} 7
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 1
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="resource",subresource="log",verb="CONNECT",version="v1"} 2
apiserver_request_total{verb="WATCH",resource="pods"} 99
`
	w, reg := parseWatches([]byte(metrics))
	if w["pods"] != 6 || w["secrets"] != 7 || len(w) != 2 || reg != -1 {
		t.Fatalf("watches %v, registered %d", w, reg)
	}
	_, reg = parseWatches([]byte(`apiserver_registered_watchers{group="",kind="Pod",version="v1"} 4` + "\n" +
		`apiserver_registered_watchers{group="",kind="Secret",version="v1"} 3` + "\n"))
	if reg != 7 {
		t.Fatalf("registered = %d, want 7", reg)
	}
}
