package cli

import (
	"maps"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/runtime/sidecar"
)

// noEffectAnnotation marks a flag that an upstream sidecar version has and kubevol
// accepts without honouring it; its value is the reason.
const noEffectAnnotation = "kubevol.io/no-effect"

// reasonAutomaxprocs: csi-lib-utils' --automaxprocs sets GOMAXPROCS from the container's
// CPU quota, which the Go runtime does itself since Go 1.25.
const reasonAutomaxprocs = "the Go runtime sets GOMAXPROCS from the cgroup CPU quota itself"

// noEffect marks the flags names of f as accepted with no effect, for reason: a manifest
// that sets one parses, and the process logs one warning line that names it.
func noEffect(f *pflag.FlagSet, reason string, names ...string) {
	for _, name := range names {
		if err := f.SetAnnotation(name, noEffectAnnotation, []string{reason}); err != nil {
			panic(err) // a typo in a flag name: a programming error
		}
	}
}

// noEffectFlags returns, for each flag of cmd that the command line set and that has no
// effect in kubevol, one line that names it and why.
func noEffectFlags(cmd *cobra.Command) []string {
	var out []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if reason := f.Annotations[noEffectAnnotation]; len(reason) > 0 {
			out = append(out, "Flag --"+f.Name+" is accepted for compatibility with upstream and has no effect: "+reason[0])
		}
	})
	return out
}

// warnNoEffect logs noEffectFlags, one warning line per flag.
func warnNoEffect(cmd *cobra.Command) {
	for _, line := range noEffectFlags(cmd) {
		klog.Warning(line)
	}
}

// ReleaseLeaderElectionOnExit needs no warning in any sidecar: kubevol's sidecars always
// release their Lease when they stop, which is what the gate turns on upstream.

// warnGates logs one warning line for each gate of gates set away from its default (known)
// whose other value kubevol does not honour; reasons says why, by gate.
func warnGates(gates map[string]bool, known map[string]sidecar.FeatureGate, reasons map[string]string) {
	for _, name := range slices.Sorted(maps.Keys(reasons)) {
		if on, ok := gates[name]; ok && on != known[name].Default {
			klog.Warningf("Flag --feature-gates %s=%v has no effect: %s", name, on, reasons[name])
		}
	}
}
