package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kubevol/kubevol/internal/runtime/version"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the kubevol version",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String())
			return err
		},
	}
}
