// Package version reports the build identity of kubevol binaries.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set at link time with -ldflags "-X github.com/kubevol/kubevol/internal/runtime/version.Version=v1.2.3".
// When unset, the VCS revision recorded by the Go toolchain is used.
var Version = ""

// Get returns the version string, never empty.
func Get() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "devel-" + s.Value[:12]
			}
		}
	}
	return "devel"
}

// String is the one-line form printed by `kubevol version` and `--version`.
func String() string {
	return fmt.Sprintf("kubevol %s (%s, %s/%s)", Get(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
