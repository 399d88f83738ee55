package provision

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
)

var upstreamVersionRE = regexp.MustCompile(`provisioner-(v[0-9][^-/]*)`)

// BuildUpstream builds upstream's external-provisioner from the Go module proxy, as the
// conformance run does (hack/conformance/upstream-sidecars.sh, cached per version), and
// returns its binary and version. It needs the kubevol source tree.
func BuildUpstream(ctx context.Context, log io.Writer) (string, string, error) {
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		return "", "", fmt.Errorf("upstream's provisioner is built from the kubevol source tree: %w (or give --upstream a csi-provisioner binary)", err)
	}
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "conformance", "upstream-sidecars.sh"))
	cmd.Stdout, cmd.Stderr, cmd.Dir = &stdout, log, root
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("building upstream's external-provisioner: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := lines[len(lines)-1]
	bin := filepath.Join(dir, "csi-provisioner")
	if _, err := os.Stat(bin); err != nil {
		return "", "", err
	}
	return bin, UpstreamVersion(bin), nil
}

// UpstreamVersion reads the version from the path of a binary that BuildUpstream made, or
// says "(version unknown)".
func UpstreamVersion(bin string) string {
	if m := upstreamVersionRE.FindStringSubmatch(bin); m != nil {
		return m[1]
	}
	return "(version unknown)"
}
