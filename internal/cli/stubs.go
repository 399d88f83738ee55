package cli

import "github.com/spf13/cobra"

// The component subcommands below are filled in by their own issues. Until then they
// exist, answer --help and exit 2 with "not implemented yet".

func notImplemented(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		RunE:  func(*cobra.Command, []string) error { return errNotImplemented },
	}
}
