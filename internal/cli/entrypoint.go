package cli

import (
	"context"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
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
	args, unknown := splitUnknownFlags(cmd, argv[1:])
	warnUnknown(cmd, name, unknown)
	return runContext(ctx, cmd, args, stdout, stderr)
}

// splitUnknownFlags takes out of args, for an entrypoint, the flags cmd does not define,
// with the value that follows one given without "=" (an entrypoint takes no positional
// argument, so a word after an unknown flag is its value). A manifest written for a newer
// upstream sidecar than the version kubevol mirrors may pass a flag kubevol lacks; upstream's
// binary would run, so kubevol's runs too, and warns (warnUnknown) instead of exiting 2 into
// a crash loop. `kubevol <role>` stays strict: a typo there is a usage error.
func splitUnknownFlags(cmd *cobra.Command, args []string) (kept, unknown []string) {
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()
	args = goFlagArgs(cmd, args)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(kept, args[i:]...), unknown
		}
		f, isFlag := flagOf(cmd, a)
		takesNext := !strings.Contains(a, "=") && i+1 < len(args)
		if isFlag && f == nil {
			unknown = append(unknown, a)
			if takesNext && !strings.HasPrefix(args[i+1], "-") {
				i++
				unknown[len(unknown)-1] += " " + args[i]
			}
			continue
		}
		kept = append(kept, a)
		if f != nil && f.NoOptDefVal == "" && takesNext {
			i++
			kept = append(kept, args[i])
		}
	}
	return kept, unknown
}

// flagOf is the flag an argument names (--name[=v] or -s), nil when cmd has none of that
// name; isFlag is false for a value, "--" or "--=v" or an attached shorthand value (-v5).
func flagOf(cmd *cobra.Command, a string) (f *pflag.Flag, isFlag bool) {
	if body, ok := strings.CutPrefix(a, "--"); ok {
		if name, _, _ := strings.Cut(body, "="); name != "" {
			return lookupFlag(cmd, name), true
		}
		return nil, false
	}
	if len(a) == 2 && a[0] == '-' && a[1] != '-' {
		return lookupShorthand(cmd, a[1:]), true
	}
	return nil, false
}

// warnUnknown logs, once logging is set up, one warning line per flag splitUnknownFlags
// took out (its value is not repeated: it may be a secret's path or a token).
func warnUnknown(cmd *cobra.Command, name string, unknown []string) {
	if len(unknown) == 0 {
		return
	}
	prev := cmd.PersistentPreRunE
	cmd.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		if err := prev(c, args); err != nil {
			return err
		}
		for _, u := range unknown {
			flagName, _, _ := strings.Cut(u, "=")
			flagName, _, _ = strings.Cut(flagName, " ")
			klog.Warningf("Flag %s is not a flag of kubevol's %s (one of a newer upstream version?): ignored", flagName, name)
		}
		return nil
	}
}
