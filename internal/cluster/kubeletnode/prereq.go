package kubeletnode

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
)

// MissingError is a prerequisite of the node that this machine lacks, with the Debian
// package that provides it.
type MissingError struct {
	What, Package string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("--runtime containerd needs %s: install the Debian package %s (apt-get install %s, or hack/install-runtime-deps.sh)", e.What, e.Package, e.Package)
}

// BusyboxPath is the static busybox that the sandbox and busybox images are made of.
const BusyboxPath = "/bin/busybox"

// CheckPrerequisites returns the first missing program, as a *MissingError. It checks
// only: it never installs anything.
func CheckPrerequisites() error {
	for _, p := range []struct{ cmd, pkg string }{
		{"containerd", "containerd"},
		{"containerd-shim-runc-v2", "containerd"},
		{"ctr", "containerd"},
		{"runc", "runc"},
		{"ip", "iproute2"},
	} {
		if _, err := exec.LookPath(p.cmd); err != nil {
			return &MissingError{What: p.cmd, Package: p.pkg}
		}
	}
	if !isStatic(BusyboxPath) {
		return &MissingError{What: "a static " + BusyboxPath + " for the images", Package: "busybox-static"}
	}
	return nil
}

// isStatic reports whether path is an ELF executable without a program interpreter, one
// that runs in an image with no libc.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	_, err = os.Stat(path)
	return err == nil
}
