package secrets

import (
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzRef checks secret templates: Ref never panics, a reference it returns always has a
// valid secret name (DNS-1123 subdomain) and namespace (DNS-1123 label), and the namespace
// never depends on what the claim's author controls beyond its namespace (its name and
// annotations). Fuzz longer with
//
//	go test -run '^$' -fuzz '^FuzzRef$' -fuzztime 10m ./internal/component/provisioner/secrets/
func FuzzRef(f *testing.F) {
	f.Add(uint8(0), "${pvc.name}-${pv.name}", "${pvc.namespace}", false, "pvc-1", "data", "team-a", "team/secret", "s3cret")
	f.Add(uint8(1), "${pvc.annotations['team/secret']}", "${pv.name}", false, "pvc-1", "data", "team-a", "team/secret", "s3cret")
	f.Add(uint8(2), "n", "${pvc.name}", false, "pvc-1", "kube-system", "team-a", "a", "b")
	f.Add(uint8(3), "n", "${pvc.annotations['ns']}", false, "pvc-1", "data", "team-a", "ns", "kube-system")
	f.Add(uint8(0), "${pvc.annotations['x']}", "x", false, "pvc-1", "data", "team-a", "x", "${pv.name}")
	f.Add(uint8(4), "$pvc.name", "$$", true, "pvc-1", "data", "team-a", "", "")
	f.Add(uint8(5), "abc${}", "${", false, "pvc-1", "data", "team-a", "k", "v")
	f.Add(uint8(6), "${pvc.annotations['a}']}", "ns-${pvc.namespace}", true, "PVC_1", "Data", "Team-A", "a}", "UPPER")
	f.Add(uint8(7), "${pv.name}.${pvc.namespace}", "${pv.name}", true, "pvc-"+string(make([]byte, 70)), "d", "n", "", "")
	kinds := append([]Kind{Default}, All...)
	f.Fuzz(func(t *testing.T, kind uint8, nameTmpl, nsTmpl string, deprecated bool, pvName, pvcName, pvcNS, annKey, annVal string) {
		k := kinds[int(kind)%len(kinds)]
		params := map[string]string{k.NameKey: nameTmpl, k.NamespaceKey: nsTmpl}
		if deprecated && k.DeprecatedNameKey != "" {
			params = map[string]string{k.DeprecatedNameKey: nameTmpl, k.DeprecatedNamespaceKey: nsTmpl}
		}
		claim := Claim{PVName: pvName, Name: pvcName, Namespace: pvcNS, Annotations: map[string]string{annKey: annVal}}
		ref, err := Ref(k, maps.Clone(params), claim)
		if err != nil {
			return
		}
		if ref == nil {
			t.Fatalf("%v: no reference and no error", params)
		}
		if errs := validation.IsDNS1123Subdomain(ref.Name); len(errs) > 0 {
			t.Fatalf("%v: invalid name %q: %v", params, ref.Name, errs)
		}
		if errs := validation.IsDNS1123Label(ref.Namespace); len(errs) > 0 {
			t.Fatalf("%v: invalid namespace %q: %v", params, ref.Namespace, errs)
		}
		// Another author's claim in the same namespace, for the same PV name, gets the
		// same namespace or an error.
		other := Claim{PVName: pvName, Name: pvcName + "x", Namespace: pvcNS, Annotations: map[string]string{annKey: annVal + "x", "y": "z"}}
		if ref2, err := Ref(k, maps.Clone(params), other); err == nil && ref2.Namespace != ref.Namespace {
			t.Fatalf("%v: namespace %q follows the claim's name or annotations (%q)", params, ref.Namespace, ref2.Namespace)
		}
	})
}
