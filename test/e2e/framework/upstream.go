package framework

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kubevol/kubevol/internal/cluster/identity"
)

// The upstream versions kubevol's sidecars mirror, whose rule files the module proxy serves.
const (
	upstreamProvisioner = "github.com/kubernetes-csi/external-provisioner/v6@v6.4.0"
	upstreamSnapshotter = "github.com/kubernetes-csi/external-snapshotter/v8@v8.7.0"
)

var (
	upstreamOnce  sync.Once
	upstreamRules map[Component]Rules
	upstreamErr   error
)

// UpstreamRules is every sidecar's upstream RBAC: the provisioner's, the csi-snapshotter's
// and the snapshot-controller's read from the rule files of the module source that `go mod
// download` fetches; the attacher's and the resizer's (their modules are not served by the
// proxy) from their upstream tables. The caller may change the map: it is a copy.
func UpstreamRules(t testing.TB) map[Component]Rules {
	t.Helper()
	upstreamOnce.Do(func() { upstreamRules, upstreamErr = readUpstreamRules() })
	if upstreamErr != nil {
		t.Fatal(upstreamErr)
	}
	out := make(map[Component]Rules, len(upstreamRules))
	for c, r := range upstreamRules {
		out[c] = r
	}
	return out
}

func readUpstreamRules() (map[Component]Rules, error) {
	prov, err := upstreamModule(upstreamProvisioner)
	if err != nil {
		return nil, err
	}
	snap, err := upstreamModule(upstreamSnapshotter)
	if err != nil {
		return nil, err
	}
	out := map[Component]Rules{}
	for c, path := range map[Component]string{
		Provisioner:        filepath.Join(prov, "deploy", "kubernetes", "rbac.yaml"),
		CSISnapshotter:     filepath.Join(snap, "deploy", "kubernetes", "csi-snapshotter", "rbac-csi-snapshotter.yaml"),
		SnapshotController: filepath.Join(snap, "deploy", "kubernetes", "snapshot-controller", "rbac-snapshot-controller.yaml"),
	} {
		r, err := upstreamRoles(path)
		if err != nil {
			return nil, err
		}
		out[c] = r
	}
	leases := []rbacv1.PolicyRule{rule("coordination.k8s.io", "leases", "get", "watch", "list", "delete", "update", "create")}
	out[Attacher] = Rules{Namespaced: leases, Cluster: []rbacv1.PolicyRule{
		rule("", "persistentvolumes", "get", "list", "watch", "patch"),
		rule("storage.k8s.io", "csinodes", "get", "list", "watch"),
		rule("storage.k8s.io", "volumeattachments", "get", "list", "watch", "patch"),
		rule("storage.k8s.io", "volumeattachments/status", "patch"),
	}}
	out[Resizer] = Rules{Namespaced: leases, Cluster: []rbacv1.PolicyRule{
		rule("", "persistentvolumes", "get", "list", "watch", "patch"),
		rule("", "persistentvolumeclaims", "get", "list", "watch"),
		rule("", "pods", "get", "list", "watch"),
		rule("", "persistentvolumeclaims/status", "patch"),
		rule("", "events", "list", "watch", "create", "update", "patch"),
		rule("storage.k8s.io", "volumeattributesclasses", "get", "list", "watch"),
	}}
	return out, nil
}

func rule(group, resource string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs}
}

// upstreamModule downloads an upstream module's source with the Go module proxy and
// returns its directory.
func upstreamModule(mod string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", mod).Output()
	var info struct{ Dir, Error string }
	_ = json.Unmarshal(out, &info) // on failure too, it says why in Error
	if info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s", mod, err, info.Error)
	}
	return info.Dir, nil
}

// upstreamRoles reads the ClusterRole and Role rules of an upstream rbac file.
func upstreamRoles(path string) (Rules, error) {
	var out Rules
	data, err := os.ReadFile(path)
	if err != nil {
		return out, err
	}
	docs, err := identity.YAMLDocuments(data)
	if err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	for _, doc := range docs {
		var role struct {
			Kind  string              `json:"kind"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := utilyaml.Unmarshal(doc, &role); err != nil {
			return out, fmt.Errorf("%s: %w", path, err)
		}
		switch role.Kind {
		case "ClusterRole":
			out.Cluster = append(out.Cluster, role.Rules...)
		case "Role":
			out.Namespaced = append(out.Namespaced, role.Rules...)
		}
	}
	return out, nil
}

// Forbidden is what a refused request leaves in a log: the apiserver's message or its code.
// The code stands alone: "403" inside a generated name (a VolumeAttachment's hex hash, a
// UID) or a number is not one.
var Forbidden = regexp.MustCompile(`(?i)forbidden|(^|[^.\w])403($|\W)`)

// NodeAuthorizerLag is the Node authorizer's refusal of a node's request for an object of a
// pod it does not yet know is bound to that node: its graph lags behind the binding, and the
// kubelet, like the node agent, retries until it catches up. The NodeRestriction admission
// plugin's refusal of a service account token for such a pod is the same lag (it reads the
// pod's node from the API server's cache).
var NodeAuthorizerLag = regexp.MustCompile(`node: no relationship found between node|node requested token bound to a pod scheduled on a different node`)

// CheckNoForbidden fails the test for each process whose log shows a refused request in a
// line that except (nil: none) does not match: every component's identity has the rights it
// needs.
func CheckNoForbidden(t testing.TB, except *regexp.Regexp, procs ...*Process) {
	t.Helper()
	for _, p := range procs {
		log, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Errorf("log of kubevol %s: %v", p.args[0], err)
			continue
		}
		for _, line := range strings.Split(string(log), "\n") {
			if m := Forbidden.FindString(line); m != "" && (except == nil || !except.MatchString(line)) {
				t.Errorf("kubevol %s logged a refused request (%q): %s", p.args[0], m, line)
			}
		}
	}
}
