package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kubevol/kubevol/internal/runtime/sidecar"
	"github.com/kubevol/kubevol/internal/runtime/version"
)

// runSidecar is the RunE of a controller sidecar: --version prints the version and nothing
// else runs, as in the upstream sidecars; otherwise the flags are validated before run.
func runSidecar(showVersion *bool, validate func() error, run func(context.Context) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if *showVersion {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String())
			return err
		}
		if err := validate(); err != nil {
			return err
		}
		if cmd.Context().Value(validateOnly{}) != nil {
			return nil
		}
		return run(cmd.Context())
	}
}

// validateOnly, as a context key, makes a sidecar command stop after its flags are
// validated: the table tests of upstream's argument lists run nothing.
type validateOnly struct{}

// flagError turns the error of a library's Validate, which names struct fields, into a
// usage error that names the flags the user set: names maps each field to its flag.
func flagError(err error, names map[string]string) error {
	return &UsageError{Err: sidecar.RenameFields(err, names)}
}
