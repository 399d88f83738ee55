package node_test

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	benchnodes "github.com/kubevol/kubevol/internal/bench/nodes"
	"github.com/kubevol/kubevol/internal/bench/report"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

// TestBenchNodes runs `kubevol bench nodes` at its smallest against this package's cluster:
// two `kubevol node` processes, each obtaining its node certificate through a bootstrap
// token, one pod each. The figures must come out, the API server must serve each node the
// watches the benchmark expects (the agent's fixed two plus one per object its pods
// reference), and nothing the run created may be left. Not parallel: the API server's
// watches must change by the benchmark's alone (parallel tests start after this one).
func TestBenchNodes(t *testing.T) {
	ctx := framework.Context(t, 3*time.Minute)
	cs := framework.Client(t)
	// The bootstrap bindings exist before the run, so that the run leaves them to others.
	framework.NodeBootstrapKubeconfig(t)
	tokens := func() int {
		l, err := cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeBootstrapToken)})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	tokensBefore := tokens()
	out := t.TempDir()
	start := time.Now()
	cmd := exec.CommandContext(ctx, framework.KubevolBinary(t), "bench", "nodes", "--kubeconfig", framework.Cluster().KubeconfigPath(),
		"--nodes", "2", "--pods-per-node", "1", "--idle", "1s", "--updates", "2", "--timeout", "90s", "--out-dir", out)
	output, err := cmd.CombinedOutput()
	t.Logf("bench nodes took %s:\n%s", time.Since(start).Round(time.Second), output)
	if err != nil {
		t.Fatalf("bench nodes: %v", err)
	}
	run := regexp.MustCompile(`namespace (bench-nodes-[a-z0-9]+), agents in (\S+)\)`).FindSubmatch(output)
	if run == nil {
		t.Fatal("no namespace and directory in the output")
	}
	ns, dir := string(run[1]), string(run[2])
	f, err := os.Open(filepath.Join(out, "nodes.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := report.ReadScalingCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rows) != 1 || s.Rows[0].X != 2 || s.Rows[0].Group != "process, 1 pods/node" || len(s.Rows[0].Values) != len(benchnodes.Series) {
		t.Fatalf("nodes.csv rows: %+v", s.Rows)
	}
	v := map[string]float64{}
	for i, name := range benchnodes.Series {
		v[name] = s.Rows[0].Values[i]
		if math.IsNaN(v[name]) {
			t.Errorf("%s not measured (the API server is a local process)", name)
		}
	}
	if v["expected_watches_per_node"] != 4 || math.Abs(v["apiserver_watches_per_node"]-4) > 0.5 {
		t.Errorf("watches per node: %v, expected %v (4)", v["apiserver_watches_per_node"], v["expected_watches_per_node"])
	}
	if v["bound_to_mounted_p99_seconds"] <= 0 || v["configmap_update_p99_seconds"] <= 0 || v["agent_rss_mib"] <= 1 {
		t.Errorf("implausible figures %v", v)
	}
	if _, err := os.Stat(filepath.Join(out, "nodes.svg")); err != nil {
		t.Error(err)
	}

	// Nothing left: Nodes, the token, the namespace (deleted, perhaps still terminating),
	// the agents' directories and mounts.
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if strings.HasPrefix(n.Name, ns+"-") {
			t.Errorf("node %s left", n.Name)
		}
	}
	if n := tokens(); n != tokensBefore {
		t.Errorf("%d bootstrap tokens after the run, %d before", n, tokensBefore)
	}
	if got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && got.DeletionTimestamp == nil {
		t.Errorf("namespace %s left", ns)
	}
	if m := kubecheck.MountsUnder(dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left (%v)", dir, err)
	}
}
