package payload_test

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"

	"github.com/kubevol/kubevol/pkg/volume/payload"
)

// FromKeys applies a configMap volume's items and modes to the ConfigMap's keys.
func ExampleFromKeys() {
	cm := &v1.ConfigMap{Data: map[string]string{"app.conf": "debug=1", "unused": "x"}}
	mode := int32(0o600)
	files, err := payload.FromKeys(payload.ConfigMapData(cm), []v1.KeyToPath{{Key: "app.conf", Path: "etc/app.conf"}}, &mode, false)
	if err != nil {
		panic(err)
	}
	var names []string
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Printf("%s %o %s\n", name, files[name].Mode, files[name].Data)
	}
	// Output: etc/app.conf 600 debug=1
}
