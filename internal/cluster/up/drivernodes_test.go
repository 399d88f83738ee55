package up

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProbeDriverNodes: a --driver with {node} is one instance per node, each registered
// with its own node's registry; instances of another driver, or with one node ID between
// them, are refused with the endpoint named.
func TestProbeDriverNodes(t *testing.T) {
	old := driverWait
	driverWait = 500 * time.Millisecond
	t.Cleanup(func() { driverWait = old })
	ctx := context.Background()
	s := &Stack{opts: Options{Dir: t.TempDir(), NodeName: "n", Nodes: 3}}
	nodes := s.Nodes()
	serve := func(dir string, names, ids []string) string {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		for i, n := range nodes {
			serveFakeAt(t, filepath.Join(dir, n.Name+".sock"), &fakeDriver{name: names[i], nodeID: ids[i], nodeOnly: i > 0})
		}
		return "unix://" + filepath.Join(dir, NodePlaceholder+".sock")
	}
	base := t.TempDir()
	ep := serve(filepath.Join(base, "ok"), []string{"x.example.com", "x.example.com", "x.example.com"}, []string{"a", "b", "c"})
	d, err := probeDriverNodes(ctx, ep, nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDrivers([]*externalDriver{d})
	if d.kubeNode != "n" || d.nodeID != "a" || d.registry != "" || len(d.nodeInstances) != 2 {
		t.Fatalf("first instance on %q, ID %q, registry %q, %d others", d.kubeNode, d.nodeID, d.registry, len(d.nodeInstances))
	}
	for i, inst := range d.nodeInstances {
		n := nodes[i+1]
		if inst.kubeNode != n.Name || inst.registry != filepath.Join(n.RootDir, "plugins_registry") || !strings.HasSuffix(inst.socket, n.Name+".sock") {
			t.Errorf("instance %d: node %q, registry %q, socket %s", i+1, inst.kubeNode, inst.registry, inst.socket)
		}
	}

	for _, tc := range []struct {
		name       string
		names, ids []string
		want       string
	}{
		{"another driver", []string{"x.example.com", "y.example.com", "x.example.com"}, []string{"a", "b", "c"}, "every node instance must be the same driver"},
		{"one node ID", []string{"x.example.com", "x.example.com", "x.example.com"}, []string{"a", "b", "a"}, "each node instance needs its own"},
	} {
		_, err := probeDriverNodes(ctx, serve(filepath.Join(base, strings.ReplaceAll(tc.name, " ", "-")), tc.names, tc.ids), nodes)
		var de *DriverError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(de.Endpoint, "n-") {
			t.Errorf("%s: %v, want a *DriverError of the node's endpoint with %q", tc.name, err, tc.want)
		}
	}
}
