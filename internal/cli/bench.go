package cli

import "github.com/spf13/cobra"

// newBenchCommand groups the benchmarks; each subcommand lives in its own bench_*.go file.
func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks of the kubevol components; each prints its figures and writes a CSV and a plot",
	}
	cmd.AddCommand(newBenchProvisionCommand(), newBenchNodeCommand(), newBenchNodesCommand(), newBenchE2ECommand(), newBenchSnapshotCommand(), newBenchKubeletCommand())
	return cmd
}
