package provisioner_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kubevol/kubevol/internal/cluster/localcluster"
	"github.com/kubevol/kubevol/internal/kubecheck"
	"github.com/kubevol/kubevol/test/e2e/framework"
)

const (
	deployNamespace = "kubevol-system"
	deployDriver    = "local.kubevol.io"
	deploySA        = "system:serviceaccount:kubevol-system:kubevol-provisioner"
)

// The manifests of deploy/provisioner pass a server-side dry run, and the RBAC is enough:
// the provisioner runs as its ServiceAccount (impersonated) with leader election, its
// provisioning records on claims and capacity tracking on, provisions and deletes a volume;
// and it has upstream's rights only: no secrets, no ConfigMaps, no claim patch or delete.
// Not parallel: it sets NAMESPACE for the provisioner process.
func TestDeployManifestsAndRBAC(t *testing.T) {
	root, err := localcluster.FindModuleRoot()
	fatalIf(t, err, "module root")
	ctx := framework.Context(t, 5*time.Minute)
	apply := applier(t)
	for _, m := range loadYAML(t, filepath.Join(root, "deploy", "base", "namespace.yaml")) {
		fatalIf(t, apply(ctx, m, false), "namespace")
	}
	objs := loadYAML(t, filepath.Join(root, "deploy", "provisioner", "rbac.yaml"))
	objs = append(objs, loadYAML(t, filepath.Join(root, "deploy", "provisioner", "deployment.yaml"))...)
	for _, m := range objs {
		fatalIf(t, apply(ctx, m, true), "dry run of %s %s", m.GetKind(), m.GetName())
	}
	for _, m := range objs {
		if m.GetKind() != "Deployment" {
			fatalIf(t, apply(ctx, m, false), "apply %s %s", m.GetKind(), m.GetName())
		}
	}

	cs := framework.Client(t)
	for _, deny := range []authv1.ResourceAttributes{
		{Verb: "list", Resource: "secrets"},
		{Verb: "patch", Resource: "persistentvolumeclaims", Namespace: "default"},
		{Verb: "delete", Resource: "persistentvolumeclaims", Namespace: "default"},
		{Verb: "get", Resource: "secrets", Namespace: "default", Name: "any"},
		{Verb: "create", Resource: "configmaps", Namespace: deployNamespace},
		{Verb: "update", Resource: "configmaps", Namespace: deployNamespace, Name: "kubevol-provisioner-local-kubevol-io"},
		{Verb: "create", Resource: "leases", Group: "coordination.k8s.io", Namespace: "default"},
	} {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{
			User: deploySA, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"},
			ResourceAttributes: &deny}}, metav1.CreateOptions{})
		fatalIf(t, err, "SubjectAccessReview")
		if sar.Status.Allowed {
			t.Errorf("the provisioner's ServiceAccount may %s %s %s/%s: not least privilege", deny.Verb, deny.Resource, deny.Namespace, deny.Name)
		}
	}

	t.Setenv("NAMESPACE", deployNamespace)
	e := newEnv(t, envOptions{driverName: deployDriver, kubeconfig: impersonatingKubeconfig(t, deploySA),
		provArgs: []string{"--leader-election", "--leader-election-namespace", deployNamespace, "--intent-namespace", deployNamespace,
			"--enable-capacity", "--capacity-ownerref-level=-1", "--capacity-poll-interval", "5s"}})
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := e.class(func(sc *storagev1.StorageClass) { sc.VolumeBindingMode = &wffc })
	pvc := e.createClaim(claimSpec("rbac", sc.Name, "16Mi", func(p *corev1.PersistentVolumeClaim) {
		p.Annotations = map[string]string{"volume.kubernetes.io/selected-node": e.node}
	}))
	_, pv := e.waitBound(pvc.Name, 2*time.Minute)

	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cs.StorageV1().CSIStorageCapacities(deployNamespace).List(ctx, metav1.ListOptions{LabelSelector: "csi.storage.k8s.io/drivername=" + deployDriver})
		if err != nil {
			return false, nil
		}
		for _, c := range list.Items {
			if c.StorageClassName == sc.Name && c.NodeTopology != nil && c.NodeTopology.MatchLabels[topologyKey] == e.node &&
				c.Labels["csi.storage.k8s.io/managed-by"] == "external-provisioner" && c.Capacity != nil && !c.Capacity.IsZero() {
				return true, nil
			}
		}
		return false, nil
	})
	fatalIf(t, err, "no CSIStorageCapacity for class %s on node %s", sc.Name, e.node)
	_, err = cs.CoordinationV1().Leases(deployNamespace).Get(ctx, "local-kubevol-io", metav1.GetOptions{})
	fatalIf(t, err, "leader election Lease")
	if _, err := kubecheck.Get("http://" + e.http + "/healthz/leader-election"); err != nil {
		t.Errorf("/healthz/leader-election: %v", err)
	}

	e.deleteClaim(pvc.Name)
	e.waitGone(e.pvGetter(pv.Name), "PV", time.Minute)
	e.waitVolumes(0, 30*time.Second)
	t.Cleanup(func() {
		bg := context.Background()
		_ = cs.CoordinationV1().Leases(deployNamespace).Delete(bg, "local-kubevol-io", metav1.DeleteOptions{})
		_ = cs.StorageV1().CSIStorageCapacities(deployNamespace).DeleteCollection(bg, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: "csi.storage.k8s.io/drivername=" + deployDriver})
	})
}

// impersonatingKubeconfig writes an admin kubeconfig that acts as user (a ServiceAccount).
func impersonatingKubeconfig(t *testing.T, user string) string {
	cfg, err := clientcmd.LoadFromFile(framework.Cluster().KubeconfigPath())
	fatalIf(t, err, "load kubeconfig")
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"}
	}
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	fatalIf(t, clientcmd.WriteToFile(*cfg, path), "write kubeconfig")
	return path
}

func loadYAML(t *testing.T, path string) []*unstructured.Unstructured {
	data, err := os.ReadFile(path)
	fatalIf(t, err, "read %s", path)
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// applier server-side applies an object, for real or as a dry run.
func applier(t *testing.T) func(context.Context, *unstructured.Unstructured, bool) error {
	cfg := framework.RESTConfig()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	fatalIf(t, err, "discovery")
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	fatalIf(t, err, "dynamic")
	return func(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == "namespace" {
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: "kubevol-provisioner-e2e", Force: ptr.To(true)}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
		return err
	}
}
