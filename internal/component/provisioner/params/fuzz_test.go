package params

import (
	"maps"
	"strings"
	"testing"

	"github.com/kubevol/kubevol/internal/component/provisioner/secrets"
)

// FuzzInterpret checks Interpret on StorageClass parameters of up to three keys: it never
// panics, answers the same whatever the map's order, strips every reserved key and keeps
// every other one, refuses exactly the unknown reserved keys and a second fsType key, and
// resolves the fsType as upstream. Fuzz longer with
//
//	go test -run '^$' -fuzz '^FuzzInterpret$' -fuzztime 10m ./internal/component/provisioner/params/
func FuzzInterpret(f *testing.F) {
	f.Add("type", "fast", "csi.storage.k8s.io/fstype", "xfs", "", "", "ext4", true)
	f.Add("csi.storage.k8s.io/fs-type", "xfs", "", "", "", "", "", false)
	f.Add("fstype", "", "FSType", "xfs", "", "", "ext4", false)
	f.Add("fstype", "", "csi.storage.k8s.io/fstype", "xfs", "", "", "", false)
	f.Add("csi.storage.k8s.io/fstype", "", "", "", "", "", "ext4", false)
	f.Add("csi.storage.k8s.io/provisioner-secret-name", "${pvc.name}", "csi.storage.k8s.io/provisioner-secret-namespace", "${pvc.namespace}", "csiNodeStageSecretName", "x", "", true)
	f.Add("csi.storage.k8s.io/pvc/name", "forged", "CSI.storage.k8s.io/x", "y", "csi.storage.k8s.io/", "", "", true)
	f.Add("fsType", "ext3", "FSTYPE", "ext3", "fStYpE", "ext3", "", false)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3, defaultFS string, withMeta bool) {
		in := map[string]string{}
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}, {k3, v3}} {
			if kv[0] != "" || kv[1] != "" {
				in[kv[0]] = kv[1]
			}
		}
		var meta *Metadata
		if withMeta {
			meta = &Metadata{PVCName: "c", PVCNamespace: "ns", PVName: "pv"}
		}
		got, err := Interpret(maps.Clone(in), defaultFS, meta)
		for range 3 { // map order is random: the answer must not be
			again, err2 := Interpret(maps.Clone(in), defaultFS, meta)
			if errString(err) != errString(err2) || got.FSType != again.FSType || !maps.Equal(got.Parameters, again.Parameters) {
				t.Fatalf("%v: %+v, %v, then %+v, %v", in, got, err, again, err2)
			}
		}
		allowed := map[string]bool{FSTypeKey: true, secrets.Default.NameKey: true, secrets.Default.NamespaceKey: true}
		for _, k := range secrets.All {
			allowed[k.NameKey], allowed[k.NamespaceKey] = true, true
		}
		unknown, fsKeys, fsType := false, 0, ""
		for k, v := range in {
			unknown = unknown || (strings.HasPrefix(k, secrets.Prefix) && !allowed[k])
			if k == FSTypeKey || strings.EqualFold(k, "fstype") {
				fsKeys++
				fsType = v
			}
		}
		if wantErr := unknown || fsKeys > 1; wantErr != (err != nil) {
			t.Fatalf("%v: error %v, want an error: %v", in, err, wantErr)
		}
		if err != nil {
			return
		}
		if fsType == "" {
			fsType = defaultFS
		}
		if got.FSType != fsType {
			t.Fatalf("%v: fsType %q, want %q", in, got.FSType, fsType)
		}
		want := map[string]string{}
		for k, v := range in {
			if !strings.HasPrefix(k, secrets.Prefix) {
				want[k] = v
			}
		}
		if meta != nil {
			want[PVCNameKey], want[PVCNamespaceKey], want[PVNameKey] = meta.PVCName, meta.PVCNamespace, meta.PVName
		}
		if !maps.Equal(got.Parameters, want) {
			t.Fatalf("%v: parameters %v, want %v", in, got.Parameters, want)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
