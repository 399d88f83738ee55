package nodes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubevol/kubevol/internal/cluster/proc"
)

// apiSnapshot is the API server at one instant: its process's usage (when it runs on this
// machine) and the watches it serves, per resource.
type apiSnapshot struct {
	at      time.Time
	usage   proc.Usage
	local   bool
	watches map[string]int
	// registered is apiserver_registered_watchers summed, -1 when the API server no longer
	// has it (removed in Kubernetes 1.25 for apiserver_longrunning_requests).
	registered int
}

func (s apiSnapshot) totalWatches() int {
	n := 0
	for _, v := range s.watches {
		n += v
	}
	return n
}

// apiServer reads the cluster's API server: /proc of its process, /metrics through the
// admin client.
type apiServer struct {
	cs  kubernetes.Interface
	pid func() int
}

func (a *apiServer) snapshot(ctx context.Context) (apiSnapshot, error) {
	s := apiSnapshot{at: time.Now()}
	if pid := a.pid(); pid > 0 {
		u, err := proc.ReadUsage(pid)
		if err != nil {
			return s, fmt.Errorf("kube-apiserver (pid %d): %w", pid, err)
		}
		s.usage, s.local = u, true
	}
	raw, err := a.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return s, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	s.watches, s.registered = parseWatches(raw)
	return s, nil
}

// parseWatches sums apiserver_longrunning_requests{verb="WATCH"} per resource, and
// apiserver_registered_watchers (-1 if absent).
func parseWatches(metrics []byte) (watches map[string]int, registered int) {
	watches, registered = map[string]int{}, -1
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "apiserver_longrunning_requests" && name != "apiserver_registered_watchers") {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch {
		case name == "apiserver_registered_watchers":
			registered = max(registered, 0) + int(v)
		case label(labels, "verb") == "WATCH":
			watches[label(labels, "resource")] += int(v)
		}
	}
	return watches, registered
}

// label is the value of key in a Prometheus label set `a="x",b="y"`.
func label(labels, key string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// delta is after minus before per resource, the resources that changed only, as
// "pods +10, secrets +10".
func delta(before, after map[string]int) string {
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	var parts []string
	for k := range keys {
		if d := after[k] - before[k]; d != 0 {
			parts = append(parts, fmt.Sprintf("%s %+d", k, d))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// loadAverage is the one-minute load average, or -1.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
