package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
)

func deployDir(t *testing.T) string {
	t.Helper()
	root, err := localcluster.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "deploy")
}

// render runs kustomize on dir, as `kubectl kustomize dir` would.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(y, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// rel is the path of deploy/'s sub directory sub seen from dir: kustomize takes only
// relative paths to other kustomizations.
func rel(t *testing.T, dir, sub string) string {
	t.Helper()
	r, err := filepath.Rel(dir, filepath.Join(deployDir(t), sub))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// overlay writes a kustomization.yaml (and other files) into a new directory; "DEPLOY/x"
// in them is the relative path of deploy/x.
func overlay(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		body = regexp.MustCompile(`DEPLOY/?([a-z]*)`).ReplaceAllStringFunc(body, func(m string) string {
			return rel(t, dir, strings.TrimPrefix(strings.TrimPrefix(m, "DEPLOY"), "/"))
		})
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func containers(t *testing.T, o *unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	list, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	out := map[string]map[string]any{}
	for _, c := range list {
		m := c.(map[string]any)
		out[m["name"].(string)] = m
	}
	return out
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

// Every base renders; every image is kubevol's, named by tag; nothing asks for a critical
// priority class; every sidecar runs as upstream's restricted securityContext.
func TestBasesRender(t *testing.T) {
	d := deployDir(t)
	for _, base := range []string{".", "sidecars", "node", "base", "driver", "provisioner", "attacher", "resizer", "approver", "snapshotter", "conversion-webhook"} {
		objs := render(t, filepath.Join(d, base))
		if len(objs) == 0 {
			t.Errorf("%s renders nothing", base)
		}
		for _, o := range objs {
			if pc, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "priorityClassName"); pc != "" {
				t.Errorf("%s: %s %s has priorityClassName %s", base, o.GetKind(), o.GetName(), pc)
			}
			for name, c := range containers(t, o) {
				img, _ := c["image"].(string)
				if !strings.HasPrefix(img, "ghcr.io/kubevol/") || !strings.Contains(img, ":") {
					t.Errorf("%s: %s/%s container %s: image %q is not kubevol's by tag", base, o.GetKind(), o.GetName(), name, img)
				}
				if args, _ := c["args"].([]any); len(args) > 0 && !strings.HasPrefix(args[0].(string), "-") {
					t.Errorf("%s: container %s passes a subcommand %q: the image's entrypoint is the role", base, name, args[0])
				}
				if strings.HasPrefix(name, "csi-") || name == "snapshot-controller" || name == "csr-approver" || name == "snapshot-conversion-webhook" {
					sc, _ := c["securityContext"].(map[string]any)
					seccomp, _, _ := unstructured.NestedString(sc, "seccompProfile", "type")
					drop, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "drop")
					if sc["runAsNonRoot"] != true || sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false ||
						seccomp != "RuntimeDefault" || len(drop) != 1 || drop[0] != "ALL" {
						t.Errorf("%s: container %s securityContext %v is not restricted", base, name, sc)
					}
				}
			}
		}
	}
	if objs := render(t, filepath.Join(d, "sidecars")); find(objs, "Deployment", "") != nil || find(objs, "ServiceAccount", "kubevol-snapshot-controller") != nil {
		t.Error("deploy/sidecars carries the snapshot-controller")
	}
}

// An overlay sets the namespace, the images and the driver name; nothing keeps the defaults.
func TestOverlaySetsNamespaceImagesAndDriverName(t *testing.T) {
	dir := overlay(t, map[string]string{
		"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: storage
resources: [DEPLOY, DEPLOY/node, name.yaml]
components: [DEPLOY/driver-name]
images:
  - {name: ghcr.io/kubevol/kubevol-driver, newName: registry.example/me/kubevol-driver, newTag: v9}
`,
		"name.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: kubevol-driver-name
  annotations: {config.kubernetes.io/local-config: "true"}
data: {name: local.example.com}
`})
	objs := render(t, dir)
	if find(objs, "ConfigMap", "kubevol-driver-name") != nil {
		t.Error("the local-config ConfigMap is in the output")
	}
	for _, o := range objs {
		if o.GetNamespace() != "" && o.GetNamespace() != "storage" {
			t.Errorf("%s %s in namespace %s", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		if o.GetKind() == "Namespace" && o.GetName() != "storage" {
			t.Errorf("namespace %s", o.GetName())
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			if ns, ok := s.(map[string]any)["namespace"]; ok && ns != "storage" {
				t.Errorf("%s %s binds a subject in %v", o.GetKind(), o.GetName(), ns)
			}
		}
	}
	if cd := find(objs, "CSIDriver", ""); cd == nil || cd.GetName() != "local.example.com" {
		t.Errorf("CSIDriver %v", cd)
	}
	for _, o := range objs {
		if o.GetKind() == "StorageClass" {
			if p, _, _ := unstructured.NestedString(o.Object, "provisioner"); p != "local.example.com" {
				t.Errorf("StorageClass %s provisioner %s", o.GetName(), p)
			}
		}
	}
	node := find(objs, "DaemonSet", "kubevol-driver-node")
	vols, _, _ := unstructured.NestedSlice(node.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		if m := v.(map[string]any); m["name"] == "plugin-dir" {
			if p, _, _ := unstructured.NestedString(m, "hostPath", "path"); p != "/var/lib/kubelet/plugins/local.example.com" {
				t.Errorf("plugin-dir %s", p)
			}
		}
	}
	drv := containers(t, node)["driver"]
	if drv["image"] != "registry.example/me/kubevol-driver:v9" {
		t.Errorf("driver image %v", drv["image"])
	}
	if !strings.Contains(toString(drv["env"]), "local.example.com") {
		t.Errorf("driver env %v", drv["env"])
	}
	if c := containers(t, find(objs, "Deployment", "kubevol-provisioner"))["driver"]; !strings.Contains(toString(c["env"]), "local.example.com") {
		t.Errorf("controller driver env %v", c["env"])
	}
	// No argument or env value keeps the base's namespace: the approver names the node
	// agents' ServiceAccount through its own namespace, which the kubelet expands.
	for _, o := range objs {
		if _, ok, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers"); !ok {
			continue
		}
		for name, c := range containers(t, o) {
			var words []string
			for _, field := range []string{"command", "args"} {
				list, _, _ := unstructured.NestedStringSlice(c, field)
				words = append(words, list...)
			}
			if env, ok := c["env"].([]any); ok {
				words = append(words, toString(env))
			}
			for _, w := range words {
				if strings.Contains(w, "kubevol-system") {
					t.Errorf("%s %s container %s: %q names kubevol-system", o.GetKind(), o.GetName(), name, w)
				}
			}
		}
	}
	// The approver runs in its own pod under its own ServiceAccount: no sidecar's token may
	// approve a kubelet client certificate.
	if _, ok := containers(t, find(objs, "Deployment", "kubevol-provisioner"))["csr-approver"]; ok {
		t.Error("the csr-approver runs in the controller pod, under the sidecars' ServiceAccount")
	}
	ad := find(objs, "Deployment", "kubevol-csr-approver")
	if sa, _, _ := unstructured.NestedString(ad.Object, "spec", "template", "spec", "serviceAccountName"); sa != "kubevol-csr-approver" {
		t.Errorf("csr-approver ServiceAccount %q, want its own", sa)
	}
	for _, b := range objs {
		if b.GetKind() != "ClusterRoleBinding" && b.GetKind() != "RoleBinding" {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		for _, sub := range subjects {
			name := sub.(map[string]any)["name"]
			if (b.GetName() == "kubevol-csr-approver") != (name == "kubevol-csr-approver") {
				t.Errorf("%s %s is bound to %v", b.GetKind(), b.GetName(), name)
			}
		}
	}
	approver := containers(t, ad)["csr-approver"]
	if args, _, _ := unstructured.NestedStringSlice(approver, "args"); !slices.Contains(args, "--service-account=$(POD_NAMESPACE):kubevol-node") {
		t.Errorf("csr-approver args %v, want the node agents' ServiceAccount in $(POD_NAMESPACE)", args)
	}
	var fromPod bool
	env, _, _ := unstructured.NestedSlice(approver, "env")
	for _, e := range env {
		m := e.(map[string]any)
		path, _, _ := unstructured.NestedString(m, "valueFrom", "fieldRef", "fieldPath")
		fromPod = fromPod || m["name"] == "POD_NAMESPACE" && path == "metadata.namespace"
	}
	if !fromPod {
		t.Errorf("csr-approver env %v, want POD_NAMESPACE from metadata.namespace", env)
	}
	if sa := find(objs, "ServiceAccount", "kubevol-node"); sa == nil || sa.GetNamespace() != "storage" {
		t.Errorf("the node agents' ServiceAccount %v, want it in the overlay's namespace", sa)
	}
}

func toString(v any) string {
	var b strings.Builder
	for _, e := range v.([]any) {
		m := e.(map[string]any)
		b.WriteString(m["name"].(string) + "=" + toStringValue(m["value"]) + " ")
	}
	return b.String()
}

func toStringValue(v any) string {
	s, _ := v.(string)
	return s
}

// An existing driver's controller (shaped as the hostpath driver's) with the sidecars base
// and the swap component: kubevol's images by container name, upstream's args untouched,
// the driver's own container and a workload without sidecars left alone. The swap matches
// upstream's image names (each container name has its image).
func TestSwapComponent(t *testing.T) {
	dir := overlay(t, map[string]string{
		"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: csi-example
resources: [DEPLOY/sidecars, driver.yaml]
components: [DEPLOY/swap]
`,
		"driver.yaml": `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: csi-hostpathplugin}
spec:
  serviceName: csi-hostpathplugin
  selector: {matchLabels: {app: hostpath}}
  template:
    metadata: {labels: {app: hostpath}}
    spec:
      containers:
        - name: hostpath
          image: registry.k8s.io/sig-storage/hostpathplugin:v1.17.0
        - name: csi-provisioner
          image: registry.k8s.io/sig-storage/csi-provisioner:v6.3.0
          args: [-v=5, --csi-address=/csi/csi.sock, --feature-gates=Topology=true]
        - name: csi-resizer
          image: registry.k8s.io/sig-storage/csi-resizer:v2.1.0
          args: [-v=5, -csi-address=/csi/csi.sock]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: mirrored}
spec:
  selector: {matchLabels: {app: mirrored}}
  template:
    metadata: {labels: {app: mirrored}}
    spec:
      containers:
        - {name: csi-attacher, image: "public.ecr.aws/csi-components/csi-attacher:v4.10.0-eksbuild.3"}
        - {name: csi-snapshotter, image: "mcr.microsoft.com/oss/v2/kubernetes-csi/csi-snapshotter:v8.3.0"}
        - {name: csi-resizer, image: "mcr.microsoft.com/oss/kubernetes-csi/csi-resizer:v1.9.0"}
        - {name: csi-provisioner, image: "docker.io/longhornio/csi-provisioner:v5.3.0"}
        - {name: livenessprobe, image: "public.ecr.aws/csi-components/livenessprobe:v2.19.0-eksbuild.7"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: unrelated}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      containers: [{name: app, image: example/app:v1}]
`})
	objs := render(t, dir)
	ss := containers(t, find(objs, "StatefulSet", "csi-hostpathplugin"))
	if len(ss) != 3 {
		t.Fatalf("containers %v", ss)
	}
	if ss["hostpath"]["image"] != "registry.k8s.io/sig-storage/hostpathplugin:v1.17.0" {
		t.Errorf("driver container swapped: %v", ss["hostpath"]["image"])
	}
	if ss["csi-provisioner"]["image"] != "ghcr.io/kubevol/csi-provisioner:latest" || ss["csi-resizer"]["image"] != "ghcr.io/kubevol/csi-resizer:latest" {
		t.Errorf("sidecars not swapped: %v %v", ss["csi-provisioner"]["image"], ss["csi-resizer"]["image"])
	}
	if args := ss["csi-resizer"]["args"].([]any); len(args) != 2 || args[1] != "-csi-address=/csi/csi.sock" {
		t.Errorf("args changed: %v", args)
	}
	// The mirrors the EKS add-ons, Azure and Longhorn pull the sidecars from.
	m := containers(t, find(objs, "Deployment", "mirrored"))
	for _, n := range []string{"csi-attacher", "csi-snapshotter", "csi-resizer", "csi-provisioner"} {
		if m[n]["image"] != "ghcr.io/kubevol/"+n+":latest" {
			t.Errorf("mirrored %s not swapped: %v", n, m[n]["image"])
		}
	}
	if m["livenessprobe"]["image"] != "public.ecr.aws/csi-components/livenessprobe:v2.19.0-eksbuild.7" {
		t.Errorf("livenessprobe swapped: %v", m["livenessprobe"]["image"])
	}
	if u := containers(t, find(objs, "Deployment", "unrelated")); len(u) != 1 || u["app"]["image"] != "example/app:v1" {
		t.Errorf("unrelated workload changed: %v", u)
	}
}

// The by-container-name recipe of docs/images.md: a replacement per sidecar sets the image of
// the named container of the named controller, whatever registry it came from, and the
// local-config ConfigMap that carries the images is not rendered.
func TestSwapByContainerName(t *testing.T) {
	recipe := `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [driver.yaml]
configMapGenerator:
  - name: kubevol-sidecar-images
    options: {annotations: {config.kubernetes.io/local-config: "true"}, disableNameSuffixHash: true}
    literals:
      - csi-provisioner=ghcr.io/kubevol/csi-provisioner:v0.1.0
      - csi-attacher=ghcr.io/kubevol/csi-attacher:v0.1.0
replacements:
  - source: {kind: ConfigMap, name: kubevol-sidecar-images, fieldPath: data.csi-provisioner}
    targets:
      - select: {kind: Deployment, name: ebs-csi-controller}
        fieldPaths:
          - spec.template.spec.containers.[name=csi-provisioner].image
  - source: {kind: ConfigMap, name: kubevol-sidecar-images, fieldPath: data.csi-attacher}
    targets:
      - select: {kind: Deployment, name: ebs-csi-controller}
        fieldPaths:
          - spec.template.spec.containers.[name=csi-attacher].image
`
	doc, err := os.ReadFile(filepath.Join(deployDir(t), "..", "docs", "images.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), recipe[strings.Index(recipe, "configMapGenerator:"):]) {
		t.Fatal("docs/images.md no longer shows this recipe")
	}
	dir := overlay(t, map[string]string{"kustomization.yaml": recipe, "driver.yaml": deployment("ebs-csi-controller", `
        - {name: ebs-plugin, image: "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.40.0"}
        - {name: csi-provisioner, image: "my-mirror.example/sidecars/provisioner:v6.3.0"}
        - {name: csi-attacher, image: "my-mirror.example/sidecars/attacher:v4.10.0"}`)})
	objs := render(t, dir)
	if len(objs) != 1 {
		t.Fatalf("rendered %d objects, want the Deployment only", len(objs))
	}
	c := containers(t, find(objs, "Deployment", "ebs-csi-controller"))
	if c["csi-provisioner"]["image"] != "ghcr.io/kubevol/csi-provisioner:v0.1.0" || c["csi-attacher"]["image"] != "ghcr.io/kubevol/csi-attacher:v0.1.0" ||
		c["ebs-plugin"]["image"] != "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.40.0" {
		t.Errorf("containers %v", c)
	}
	// A controller without one of the named containers fails the build, not silently.
	missing := overlay(t, map[string]string{"kustomization.yaml": recipe, "driver.yaml": deployment("ebs-csi-controller", `
        - {name: csi-provisioner, image: "x/provisioner:v6"}`)})
	if _, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), missing); err == nil {
		t.Error("a controller without csi-attacher rendered without an error")
	}
}

// deployment is a Deployment named name whose pod has containers, a YAML list indented for
// the pod spec.
func deployment(name, containers string) string {
	return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: " + name + "}\nspec:\n" +
		"  selector: {matchLabels: {app: " + name + "}}\n  template:\n    metadata: {labels: {app: " + name + "}}\n" +
		"    spec:\n      containers:" + containers + "\n"
}
