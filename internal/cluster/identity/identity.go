// Package identity runs a kubevol component as itself: a ServiceAccount bound to exactly
// the RBAC that deploy/ ships for it, and a kubeconfig whose only credential is a bound
// token of that ServiceAccount (TokenRequest). `kubevol up` and the e2e framework both use
// it; admin credentials only create the objects.
package identity

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"path"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kubevol/kubevol/deploy"
)

// Component is a kubevol component whose RBAC deploy/ ships: the value of the
// app.kubernetes.io/component label on its objects.
type Component string

// The components with RBAC in deploy/.
const (
	Provisioner        Component = "provisioner"
	Attacher           Component = "attacher"
	Resizer            Component = "resizer"
	CSISnapshotter     Component = "csi-snapshotter"
	SnapshotController Component = "snapshot-controller"
	CSRApprover        Component = "csr-approver"
)

// componentDir is the folder of deploy/ that holds each component's rbac.yaml.
var componentDir = map[Component]string{
	Provisioner: "provisioner", Attacher: "attacher", Resizer: "resizer",
	CSISnapshotter: "snapshotter", SnapshotController: "snapshotter", CSRApprover: "approver",
}

// Rules is RBAC to bind to a ServiceAccount: cluster-wide rules (one ClusterRole) and
// rules in the ServiceAccount's namespace (one Role).
type Rules struct {
	Cluster, Namespaced []rbacv1.PolicyRule
}

// Add appends r's rules to rules.
func (rules *Rules) Add(r Rules) {
	rules.Cluster = append(rules.Cluster, r.Cluster...)
	rules.Namespaced = append(rules.Namespaced, r.Namespaced...)
}

// ShippedRules are the rules deploy/ ships for the components: every ClusterRole and Role
// of each one's folder labelled app.kubernetes.io/component=<component>. Roles are
// rendered into the ServiceAccount's namespace by Ensure, whatever namespace the manifest
// names.
func ShippedRules(components ...Component) (Rules, error) {
	var out Rules
	for _, c := range components {
		r, err := shipped(c)
		if err != nil {
			return Rules{}, err
		}
		out.Add(r)
	}
	return out, nil
}

func shipped(c Component) (Rules, error) {
	dir, ok := componentDir[c]
	if !ok {
		return Rules{}, fmt.Errorf("no RBAC of component %q in deploy/", c)
	}
	file := path.Join(dir, "rbac.yaml")
	data, err := deploy.RBAC.ReadFile(file)
	if err != nil {
		return Rules{}, err
	}
	docs, err := YAMLDocuments(data)
	if err != nil {
		return Rules{}, fmt.Errorf("deploy/%s: %w", file, err)
	}
	var out Rules
	for _, doc := range docs {
		var meta struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := utilyaml.Unmarshal(doc, &meta); err != nil {
			return Rules{}, fmt.Errorf("deploy/%s: %w", file, err)
		}
		if meta.Metadata.Labels["app.kubernetes.io/component"] != string(c) || (meta.Kind != "ClusterRole" && meta.Kind != "Role") {
			continue
		}
		var role rbacv1.ClusterRole // a Role has the same rules field
		if err := utilyaml.Unmarshal(doc, &role); err != nil {
			return Rules{}, fmt.Errorf("deploy/%s: %w", file, err)
		}
		if meta.Kind == "ClusterRole" {
			out.Cluster = append(out.Cluster, role.Rules...)
		} else {
			out.Namespaced = append(out.Namespaced, role.Rules...)
		}
	}
	if len(out.Cluster)+len(out.Namespaced) == 0 {
		return Rules{}, fmt.Errorf("deploy/%s has no role of component %q", file, c)
	}
	return out, nil
}

// YAMLDocuments splits a multi-document YAML file into its non-empty documents.
func YAMLDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// User is the user name of ServiceAccount ns/name.
func User(ns, name string) string {
	return fmt.Sprintf("system:serviceaccount:%s:%s", ns, name)
}
