package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	benchnodes "github.com/kubevol/kubevol/internal/bench/nodes"
)

// The limits of bench nodes' flags: the kubelet's default --max-pods per node, and as many
// node agents as one machine can hold (as processes, each is a Go program of its own).
const (
	maxBenchNodes        = 5000
	maxBenchProcessNodes = 1000
	maxBenchPodsPerNode  = 110
)

func newBenchNodesCommand() *cobra.Command {
	cfg := benchnodes.Config{}
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "many node agents: API server cost per node, agent footprint, mount and update latency against the node count",
		Long: `nodes starts one node agent per node, each with its own identity (system:node:<name>, a client
certificate it obtains through a bootstrap token, as 'kubevol node --bootstrap-kubeconfig' does),
either as 'kubevol node' processes (--agents process) or as volume managers embedded in this
process through pkg/volumemanager (--agents library, for node counts a machine cannot hold as
processes). Each node gets --pods-per-node pods with a configMap (one ConfigMap shared by every
pod), a secret (one Secret per node), an emptyDir and a downwardAPI volume, bound by the benchmark
itself. It reports per node the API server's CPU seconds (agent start, binding and mounting),
its idle CPU and RSS growth, and the watches it serves against the agent's fixed watches plus
one per referenced object; per agent its idle RSS and CPU; the time from binding to mounted
(p50, p99) and from a ConfigMap update to the files of every pod (p99). The API server's
CPU and RSS are read from /proc, so they are measured for a local API server only (the
'kubevol up' cluster or the throwaway one). --nodes takes a list (10,100): one run each, on the
same cluster. It runs as root, writes nodes.csv and nodes.svg to --out-dir (keeping the rows
of earlier runs at other node counts), and deletes everything it created.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateBenchNodes(&cfg); err != nil {
				return err
			}
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the kubevol binary: %w", err)
			}
			cfg.Binary, cfg.Out = bin, cmd.OutOrStdout()
			return benchnodes.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Nodes, "nodes", []int{10}, "node counts, one run each (e.g. 10,100)")
	f.IntVar(&cfg.PodsPerNode, "pods-per-node", 20, "pods bound to each node")
	f.StringVar(&cfg.Agents, "agents", benchnodes.AgentsProcess, "how the agents run: process ('kubevol node' processes) or library (volume managers in this process)")
	f.IntVar(&cfg.Updates, "updates", 3, "ConfigMap updates whose propagation to every pod is measured (0 skips)")
	f.DurationVar(&cfg.Idle, "idle", 15*time.Second, "how long the idle API server and agents are measured, before the agents start and with everything mounted")
	f.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "cluster to run against (default: the 'kubevol up' cluster, else a new local cluster)")
	f.StringVar(&cfg.OutDir, "out-dir", ".", "directory for nodes.csv and nodes.svg")
	f.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "give up waiting for the agents, the mounts or an update after this long")
	return cmd
}

func validateBenchNodes(cfg *benchnodes.Config) error {
	if cfg.Agents != benchnodes.AgentsProcess && cfg.Agents != benchnodes.AgentsLibrary {
		return usageErrorf("--agents %q: want %s or %s", cfg.Agents, benchnodes.AgentsProcess, benchnodes.AgentsLibrary)
	}
	if len(cfg.Nodes) == 0 {
		return usageErrorf("--nodes needs at least one node count")
	}
	limit := maxBenchNodes
	if cfg.Agents == benchnodes.AgentsProcess {
		limit = maxBenchProcessNodes
	}
	for _, n := range cfg.Nodes {
		if n < 1 || n > limit {
			return usageErrorf("--nodes %d: want 1 to %d with --agents %s", n, limit, cfg.Agents)
		}
	}
	switch {
	case cfg.PodsPerNode < 1 || cfg.PodsPerNode > maxBenchPodsPerNode:
		return usageErrorf("--pods-per-node must be between 1 and %d, got %d", maxBenchPodsPerNode, cfg.PodsPerNode)
	case cfg.Updates < 0:
		return usageErrorf("--updates must not be negative, got %d", cfg.Updates)
	case cfg.Idle < time.Second:
		return usageErrorf("--idle must be at least 1s, got %s", cfg.Idle)
	case cfg.Timeout <= 0:
		return usageErrorf("--timeout must be positive, got %s", cfg.Timeout)
	}
	return nil
}
