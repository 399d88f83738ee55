package cli

import (
	"context"
	"io"
	"maps"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"
)

// entrypoints are the names the one kubevol binary answers to when it is started under
// them (the base name of argv[0], a copy of or link to the binary), with the command that
// then runs on the flags alone. Upstream's images start each sidecar as /<name> followed
// by the manifest's args, never a subcommand: the first six names are upstream's image
// names; the last three are kubevol's own images (the driver, the node agent and the
// CSR approver).
var entrypoints = map[string]func() *cobra.Command{
	"csi-provisioner":             newProvisionerCommand,
	"csi-attacher":                newAttacherCommand,
	"csi-resizer":                 newResizerCommand,
	"csi-snapshotter":             newCSISnapshotterCommand,
	"snapshot-controller":         newSnapshotControllerCommand,
	"snapshot-conversion-webhook": newConversionWebhookCommand,
	"kubevol-driver":              newDriverCommand,
	"kubevol-node":                newNodeCommand,
	"kubevol-csr-approver":        newCSRApproverCommand,
}

// Entrypoints lists the names of argv[0] that run one role (see Main), sorted.
func Entrypoints() []string { return slices.Sorted(maps.Keys(entrypoints)) }

// Main runs the process: argv is the whole os.Args. Started as one of Entrypoints, it
// runs that role with argv[1:] as its flags; otherwise argv[1:] is a kubevol command line.
func Main(argv []string, stdout, stderr io.Writer) int {
	return mainContext(context.Background(), argv, stdout, stderr)
}

func mainContext(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	if len(argv) == 0 {
		return runContext(ctx, NewRootCommand(), nil, stdout, stderr)
	}
	name := filepath.Base(argv[0])
	newCmd, ok := entrypoints[name]
	if !ok {
		return runContext(ctx, NewRootCommand(), argv[1:], stdout, stderr)
	}
	cmd := newCmd()
	cmd.Use = name
	setupRoot(cmd)
	if cmd.Args == nil {
		cmd.Args = noArgs
	}
	return runContext(ctx, cmd, argv[1:], stdout, stderr)
}
