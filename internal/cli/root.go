// Package cli builds the kubevol command tree. Each subcommand lives in its own file and
// turns validated flags into a call into the package that does the work.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/redact"
	"github.com/kubevol/kubevol/internal/runtime/version"
)

// Exit codes. Bad flags or arguments exit 2, as upstream sidecars and most Unix tools do.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// UsageError marks an error caused by the command line rather than by the work.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// usageErrorf returns a *UsageError, which makes the command exit 2.
func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// NewRootCommand returns the `kubevol` command with every subcommand attached.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:     "kubevol",
		Short:   "kubevol: the Kubernetes volume lifecycle (provisioning, attach, node mount)",
		Version: version.Get(),
	}
	root.SetVersionTemplate(version.String() + "\n")
	setupRoot(root)
	root.AddCommand(
		newUpCommand(),
		newProvisionerCommand(),
		newAttacherCommand(),
		newResizerCommand(),
		newSnapshotterCommand(),
		newCSISnapshotterCommand(),
		newSnapshotControllerCommand(),
		newConversionWebhookCommand(),
		newNodeCommand(),
		newCSRApproverCommand(),
		newDriverCommand(),
		newVerifyCommand(),
		newBenchCommand(),
		newVersionCommand(),
	)
	for _, c := range root.Commands() {
		if c.Args == nil {
			c.Args = noArgs
		}
	}
	return root
}

// setupRoot makes cmd the root of a command tree: usage errors exit 2 and print one line,
// and the logging flags are global, as in every Kubernetes component.
func setupRoot(cmd *cobra.Command) {
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{Err: err} })
	goflags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(goflags)
	cmd.PersistentFlags().AddGoFlagSet(goflags)
	logging := &loggingOptions{klog: goflags}
	logging.addFlags(cmd.PersistentFlags())
	// After parsing, before any command runs: the log format first, so that the warnings
	// about flags without effect are written in it.
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if err := logging.apply(c.OutOrStdout(), c.ErrOrStderr()); err != nil {
			return err
		}
		warnNoEffect(c)
		return nil
	}
}

// Execute runs the kubevol command line args (os.Args[1:]) and returns the process exit code.
func Execute(args []string, stdout, stderr io.Writer) int {
	return run(NewRootCommand(), args, stdout, stderr)
}

// run executes the command tree of root on args and returns the process exit code.
func run(root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), root, args, stdout, stderr)
}

// runContext is run under parent, which also ends the command.
func runContext(parent context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	// Every command, at every -v: no secret, token or Secret body in a log line (see
	// redact.LogFilter for what client-go logs from -v=8 on and why a filter stops it).
	klog.SetLogFilter(redact.LogFilter{})
	target := root
	if c, _, err := root.Find(args); err == nil && c != nil {
		target = c
	}
	target.InitDefaultHelpFlag()
	root.InitDefaultVersionFlag()
	root.SetArgs(goFlagArgs(target, args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, err := root.ExecuteContextC(ctx)
	defer resetLogging()
	if err == nil {
		return exitOK
	}
	name := "kubevol"
	if cmd != nil {
		name = cmd.CommandPath()
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var ue *UsageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		if cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return exitUsage
	}
	return exitFailure
}

// isCobraUsageError recognises the errors cobra builds itself for an unknown subcommand,
// which do not pass through the flag error func.
func isCobraUsageError(err error) bool {
	return strings.HasPrefix(err.Error(), "unknown command ")
}

// noArgs rejects positional arguments with a usage error: every kubevol command takes flags only.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q: %s takes flags only", args[0], cmd.CommandPath())
	}
	return nil
}
