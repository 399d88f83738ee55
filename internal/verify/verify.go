// Package verify checks a CSI driver's Kubernetes-level volume lifecycle against a running
// `kubevol up`: provisioning, mounts seen from the host, access modes, raw block, ephemeral
// volumes, attach, expansion, snapshots and clones, crash recovery and reclaim, each case in
// a namespace of its own, as far as the driver's capabilities allow. It plays the part of
// Kubernetes' external storage e2e suite without containers: pods are run by kubevol's node
// agent, which only mounts their volumes, and data is read through the host's mount paths.
// `kubevol verify` is its command line.
package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Options configure Run.
type Options struct {
	// Driver is the CSI driver to verify; StorageClass names a class whose provisioner is
	// the driver instead. One of the two is required.
	Driver       string
	StorageClass string
	// Dir is the state directory of a `kubevol up` of this machine; Kubeconfig is used
	// instead for a cluster elsewhere, where the cases that need the node's host are not
	// applicable.
	Dir        string
	Kubeconfig string
	// NodeRootDir is the node's root directory on this machine (the kubelet's or node
	// agent's --root-dir), when Kubeconfig names a cluster whose node runs here: the host
	// cases then read the pods' volumes there. Without it, Dir's node agent (<Dir>/node) or
	// kubelet (<Dir>/runtime/kubelet, kubevol up --runtime containerd) is used.
	NodeRootDir string
	// RestartDriver is a shell command that restarts the driver, for the restart case.
	RestartDriver string
	// MaxVolumesCommand is a shell command that makes the driver's NodeGetInfo report the
	// max_volumes_per_node in $KUBEVOL_VERIFY_MAX_VOLUMES, for the allocatable refresh case.
	MaxVolumesCommand string
	// BlockParameters are added to the StorageClass parameters of the raw block and the
	// filesystem size cases (expansion, larger copies); nil means the default (DefaultBlockParameters).
	BlockParameters map[string]string
	// ModifyParameters are the parameters of a VolumeAttributesClass the driver accepts,
	// for the modification cases; nil means the default (DefaultModifyParameters for
	// kubevol's own driver, none otherwise: the cases are then not applicable).
	// InfeasibleModifyParameters are ones it refuses with INVALID_ARGUMENT; nil means
	// DefaultInfeasibleModifyParameters.
	ModifyParameters, InfeasibleModifyParameters map[string]string
	// MountOptions are mount options the driver supports, for the case that checks them on
	// the mount; nil means the StorageClass's, or DefaultMountOptions for kubevol's driver.
	MountOptions []string
	// Parallel is how many cases run at once (the disruptive ones always run alone).
	Parallel int
	// Timeout bounds each case.
	Timeout time.Duration
	// Wait bounds the wait for the cluster to be ready and the driver registered; it is
	// counted from when the kubevol up of Dir stops building or starting (upWait).
	Wait time.Duration
	// Only, if set, runs the cases it names: each entry is a case's name, or a prefix
	// ending in "/" for a group of cases (CheckOnly).
	Only []string
	// Progress receives a line per case as it starts and ends.
	Progress io.Writer
}

// Outcome of a case.
type Outcome string

// Outcomes.
const (
	Passed        Outcome = "passed"
	Failed        Outcome = "FAILED"
	NotApplicable Outcome = "not applicable"
)

// Result is one case's outcome.
type Result struct {
	Name     string
	Outcome  Outcome
	Duration time.Duration
	// Detail is the reason a case is not applicable, or the error of a failure followed
	// by the event or CSI error that explains it.
	Detail string
}

// Report is a whole run.
type Report struct {
	Driver       string
	StorageClass string
	Results      []Result
	Duration     time.Duration
}

// Failed reports whether any case failed.
func (r *Report) Failed() bool {
	for _, res := range r.Results {
		if res.Outcome == Failed {
			return true
		}
	}
	return false
}

// notApplicable is returned by a case that finds out while running that the driver does
// not offer what it checks (a driver that refuses raw block, say).
type notApplicable struct{ reason string }

func (n notApplicable) Error() string { return n.reason }

func skip(format string, args ...any) error { return notApplicable{fmt.Sprintf(format, args...)} }

// Run verifies the driver and returns the report; err is for a run that could not start
// (no cluster, no such driver), not for failed cases.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := CheckOnly(o.Only); err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Parallel <= 0 {
		o.Parallel = 3
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Minute
	}
	if o.Wait <= 0 {
		o.Wait = 30 * time.Second
	}
	start := time.Now()
	e, err := newEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close()
	fmt.Fprintf(o.Progress, "verify: driver %s, StorageClass %s, node %s; %s\n", e.driver, e.baseName(), e.node, e.describe())

	rep := &Report{Driver: e.driver, StorageClass: e.baseName()}
	cases := selected(allCases(), o.Only)
	results := make([]Result, len(cases))
	var done int
	var mu sync.Mutex
	run := func(i int) {
		results[i] = e.runCase(ctx, cases[i])
		mu.Lock()
		done++
		r := results[i]
		line := fmt.Sprintf("[%d/%d] %-28s %-14s %6s", done, len(cases), r.Name, r.Outcome, r.Duration.Round(100*time.Millisecond))
		if r.Outcome != Passed && r.Detail != "" {
			line += "  " + firstLine(r.Detail)
		}
		fmt.Fprintln(o.Progress, line)
		mu.Unlock()
	}
	// Ordinary cases share the cluster; disruptive ones (killing the node agent,
	// restarting the driver) run alone afterwards, and the leftover check runs last.
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for i, c := range cases {
		if c.phase != phaseShared {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			run(i)
		}()
	}
	wg.Wait()
	for _, ph := range []phase{phaseAlone, phaseLast} {
		for i, c := range cases {
			if c.phase == ph {
				run(i)
			}
		}
	}
	rep.Results = results
	if err := e.removeClasses(); err != nil {
		rep.Results = append(rep.Results, Result{Name: "cleanup", Outcome: Failed, Detail: err.Error()})
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// runCase runs one case in a namespace of its own and removes everything it created.
func (e *env) runCase(ctx context.Context, c *testCase) Result {
	r := Result{Name: c.name}
	if reason := e.applies(c); reason != "" {
		r.Outcome, r.Detail = NotApplicable, reason
		return r
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, e.o.Timeout)
	defer cancel()
	k, err := e.newCaseEnv(cctx, c.name)
	if err == nil {
		err = c.run(k)
	}
	var na notApplicable
	if errors.As(err, &na) {
		r.Outcome, r.Detail = NotApplicable, na.reason
	} else if err != nil {
		r.Outcome = Failed
		r.Detail = err.Error()
		if why := k.explain(); why != "" {
			r.Detail += "\n" + why
		}
	} else {
		r.Outcome = Passed
	}
	if k != nil {
		if cerr := k.cleanup(); cerr != nil && r.Outcome != Failed {
			r.Outcome, r.Detail = Failed, "cleanup: "+cerr.Error()
		}
	}
	r.Duration = time.Since(start)
	return r
}

func (e *env) applies(c *testCase) string {
	if c.host && e.root == "" {
		return "needs the node's host: not a kubevol up of this machine (--kubeconfig given without --node-root-dir, or no node directory under --dir)"
	}
	if c.applies != nil {
		return c.applies(e)
	}
	return ""
}

// selects says whether an entry of Options.Only selects the case name: an entry is a case's
// exact name, or a group's prefix ending in "/" ("expand/" is expand/offline, expand/online
// and expand/online-block). A bare substring would select more than it names: expand/online
// would also run expand/online-block.
func selects(entry, name string) bool {
	if strings.HasSuffix(entry, "/") {
		return strings.HasPrefix(name, entry)
	}
	return name == entry
}

func selected(cases []*testCase, only []string) []*testCase {
	if len(only) == 0 {
		return cases
	}
	var out []*testCase
	for _, c := range cases {
		for _, o := range only {
			if selects(o, c.name) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// CheckOnly refuses entries of Options.Only that select no case: a misspelt name, or a
// part of one (crash/node for crash/node-agent), would otherwise run nothing in its place.
func CheckOnly(only []string) error {
	var unknown []string
	for _, o := range only {
		if len(selected(allCases(), []string{o})) == 0 {
			unknown = append(unknown, fmt.Sprintf("%q", o))
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%s selects no case: give case names, or group prefixes ending in \"/\" (expand/); the cases: %s",
			strings.Join(unknown, ", "), strings.Join(CaseNames(), ", "))
	}
	return nil
}

// CaseNames lists every case in the order they run.
func CaseNames() []string {
	var out []string
	for _, c := range allCases() {
		out = append(out, c.name)
	}
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
