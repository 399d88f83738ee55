// Package secrets resolves the CSI secret references of a StorageClass: the seven
// csi.storage.k8s.io/*-secret-name/-namespace pairs, the default pair that backs them all,
// the deprecated csi*Secret* keys, and the ${...} templates in their values. The rules are
// the external-provisioner's, so that StorageClasses written for it keep working.
package secrets

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Prefix is the reserved namespace of StorageClass parameters interpreted by the provisioner.
const Prefix = "csi.storage.k8s.io/"

// Kind is one type of secret a StorageClass can name.
type Kind struct {
	// Name is a human name for messages, e.g. "provisioner".
	Name string
	// NameKey and NamespaceKey are the csi.storage.k8s.io/ parameter keys.
	NameKey, NamespaceKey string
	// DeprecatedNameKey and DeprecatedNamespaceKey are the pre-1.0 keys, if any.
	DeprecatedNameKey, DeprecatedNamespaceKey string
}

func kind(name, deprecated string) Kind {
	k := Kind{Name: name, NameKey: Prefix + name + "-secret-name", NamespaceKey: Prefix + name + "-secret-namespace"}
	if deprecated != "" {
		k.DeprecatedNameKey, k.DeprecatedNamespaceKey = deprecated+"SecretName", deprecated+"SecretNamespace"
	}
	return k
}

// The seven kinds of secret, and the default pair that fills in for any of them.
var (
	Provisioner       = kind("provisioner", "csiProvisioner")
	ControllerPublish = kind("controller-publish", "csiControllerPublish")
	NodeStage         = kind("node-stage", "csiNodeStage")
	NodePublish       = kind("node-publish", "csiNodePublish")
	ControllerExpand  = kind("controller-expand", "")
	NodeExpand        = kind("node-expand", "")
	ControllerModify  = kind("controller-modify", "")
	Default           = Kind{Name: "default", NameKey: Prefix + "secret-name", NamespaceKey: Prefix + "secret-namespace"}

	All = []Kind{Provisioner, ControllerPublish, NodeStage, NodePublish, ControllerExpand, NodeExpand, ControllerModify}
)

// Claim is what a template may refer to. At deletion time only PVName and Namespace are
// known, as upstream.
type Claim struct {
	PVName      string
	Name        string
	Namespace   string
	Annotations map[string]string
}

// Ref resolves the secret reference of kind k from StorageClass parameters. It returns nil
// when the class names no secret of that kind (nor a default one).
func Ref(k Kind, params map[string]string, c Claim) (*corev1.SecretReference, error) {
	nameTmpl, nsTmpl, err := templates(k, params)
	if err != nil || nameTmpl == "" {
		return nil, err
	}
	// The namespace cannot come from anything the claim's author controls beyond its own
	// namespace, or a user could read another namespace's secrets.
	nameVars := map[string]string{"pv.name": c.PVName, "pvc.name": c.Name, "pvc.namespace": c.Namespace}
	for key, v := range c.Annotations {
		nameVars["pvc.annotations['"+key+"']"] = v
	}
	return Template(k.Name, nameTmpl, nsTmpl, nameVars, map[string]string{"pv.name": c.PVName, "pvc.namespace": c.Namespace})
}

// Template resolves a secret reference from its name and namespace templates: ${...}
// tokens of the name come from nameVars, those of the namespace from nsVars, and the results
// must be a valid secret name and namespace. what names the secret in errors. The
// snapshotter's secrets follow the same rules with other variables.
func Template(what, nameTmpl, nsTmpl string, nameVars, nsVars map[string]string) (*corev1.SecretReference, error) {
	ns, err := resolve(nsTmpl, nsVars)
	if err != nil {
		return nil, fmt.Errorf("%s secret namespace template %q: %w", what, nsTmpl, err)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return nil, fmt.Errorf("%s secret namespace %q (from template %q) is not a valid namespace name: %s", what, ns, nsTmpl, strings.Join(errs, "; "))
	}
	name, err := resolve(nameTmpl, nameVars)
	if err != nil {
		return nil, fmt.Errorf("%s secret name template %q: %w", what, nameTmpl, err)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("%s secret name %q (from template %q) is not a valid secret name: %s", what, name, nameTmpl, strings.Join(errs, "; "))
	}
	return &corev1.SecretReference{Name: name, Namespace: ns}, nil
}

// templates picks the name and namespace templates of kind k: its own keys, else the
// deprecated ones, else the default pair. Half a pair, an empty value, or both the new and
// the deprecated key are errors.
func templates(k Kind, params map[string]string) (string, string, error) {
	name, hasName := params[k.NameKey]
	ns, hasNS := params[k.NamespaceKey]
	if k.DeprecatedNameKey != "" {
		dname, hasDName := params[k.DeprecatedNameKey]
		dns, hasDNS := params[k.DeprecatedNamespaceKey]
		if (hasName && hasDName) || (hasNS && hasDNS) {
			return "", "", fmt.Errorf("StorageClass sets the %s secret twice: remove the deprecated %s/%s keys and keep %s/%s",
				k.Name, k.DeprecatedNameKey, k.DeprecatedNamespaceKey, k.NameKey, k.NamespaceKey)
		}
		if hasDName || hasDNS {
			name, hasName, ns, hasNS = dname, hasDName, dns, hasDNS
		}
	}
	if !hasName && !hasNS && k.NameKey != Default.NameKey {
		return templates(Default, params)
	}
	switch {
	case !hasName && !hasNS:
		return "", "", nil
	case hasName != hasNS:
		return "", "", fmt.Errorf("StorageClass sets only one of %s and %s: the %s secret needs both", k.NameKey, k.NamespaceKey, k.Name)
	case name == "" || ns == "":
		return "", "", fmt.Errorf("StorageClass sets an empty %s or %s", k.NameKey, k.NamespaceKey)
	}
	return name, ns, nil
}

var tokenRE = regexp.MustCompile(`\$\{([^}]*)\}`)

// resolve expands the ${...} tokens of tmpl from vars. Unknown tokens (including an
// annotation the claim does not have) are an error listing all of them.
func resolve(tmpl string, vars map[string]string) (string, error) {
	var missing []string
	out := os.Expand(tmpl, func(token string) string {
		v, ok := vars[token]
		if !ok {
			missing = append(missing, "${"+token+"}")
		}
		return v
	})
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", fmt.Errorf("invalid tokens %v: only %s may be used here", missing, allowed(vars))
	}
	if tokenRE.MatchString(out) {
		return "", fmt.Errorf("template expands to another template: %q", out)
	}
	return out, nil
}

func allowed(vars map[string]string) string {
	var names []string
	for k := range vars {
		if !strings.HasPrefix(k, "pvc.annotations[") {
			names = append(names, "${"+k+"}")
		}
	}
	if _, ok := vars["pvc.name"]; ok {
		names = append(names, "${pvc.annotations['<key>']}")
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
