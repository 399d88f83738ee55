package cli

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// goFlagArgs rewrites the forms Go's flag package accepts and pflag does not, so that a
// manifest written for an upstream sidecar (parsed by Go's flag package) parses unchanged:
// a long name after a single dash (-csi-address=/csi/csi.sock, -v=5 stays a shorthand) is
// given its second dash. The value of a flag given as a separate argument (--timeout 10s,
// --volume-name-uuid-length -1) and everything after "--" are left as they are.
func goFlagArgs(cmd *cobra.Command, args []string) []string {
	out := make([]string, 0, len(args))
	takesValue := func(f *pflag.Flag) bool { return f != nil && f.NoOptDefVal == "" }
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			continue // a positional argument or "-"
		}
		body := strings.TrimPrefix(a[1:], "-")
		doubleDash := a[1] == '-'
		name, _, hasValue := strings.Cut(body, "=")
		var f *pflag.Flag
		switch {
		case doubleDash:
			f = lookupFlag(cmd, name)
		case len(name) == 1:
			f = lookupShorthand(cmd, name)
		default:
			// -name: a long flag, as Go's flag package reads it; a shorthand with its value
			// attached (-v5) only when no long flag has the name.
			if f = lookupFlag(cmd, name); f != nil || lookupShorthand(cmd, name[:1]) == nil {
				out[len(out)-1] = "--" + body
			} else {
				continue
			}
		}
		if !hasValue && takesValue(f) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// lookupFlag finds a long flag of cmd, its own or inherited from its parents.
func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags(), cmd.InheritedFlags()} {
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

func lookupShorthand(cmd *cobra.Command, s string) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags(), cmd.InheritedFlags()} {
		if f := fs.ShorthandLookup(s); f != nil {
			return f
		}
	}
	return nil
}
