package kubeletoverlay

import (
	"strings"
	"testing"
)

// volumeManagerSource builds a stand-in for the kubelet's volume_manager.go with the given
// parameter list.
func volumeManagerSource(params string) []byte {
	return []byte("package volumemanager\n\n// NewVolumeManager builds one.\nfunc NewVolumeManager(" + params + ") VolumeManager {\n\treturn nil\n}\n\nfunc other() { _ = NewVolumeManager }\n")
}

func TestRenameConstructor(t *testing.T) {
	out, err := renameConstructor(volumeManagerSource(strings.Join(wantParams, ", ")))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if !strings.Contains(s, "func "+stockConstructor+"(controllerAttachDetachEnabled bool,") {
		t.Errorf("constructor not renamed:\n%s", s)
	}
	// Only the declaration is renamed: the hook file declares NewVolumeManager again, and
	// upstream's own uses of the name then call it.
	if !strings.Contains(s, "_ = NewVolumeManager") || strings.Count(s, stockConstructor) != 1 {
		t.Errorf("more than the declaration changed:\n%s", s)
	}
}

// A constructor whose signature changed stops the build with what was expected, instead of
// a hook that passes arguments in the wrong order.
func TestRenameConstructorRefusesAnotherShape(t *testing.T) {
	changed := append([]string{"ctx context.Context"}, wantParams...)
	for name, src := range map[string][]byte{
		"new parameter":  volumeManagerSource(strings.Join(changed, ", ")),
		"no constructor": []byte("package volumemanager\n\nfunc New() VolumeManager { return nil }\n"),
		"other package":  []byte("package kubelet\n\nfunc NewVolumeManager() {}\n"),
	} {
		if _, err := renameConstructor(src); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "update internal/cluster/kubeletoverlay") && name != "other package" {
			t.Errorf("%s: %v does not say what to do", name, err)
		}
	}
}

func TestCheckDriversStore(t *testing.T) {
	good := "package csi\n\ntype Driver struct {\n\tendpoint string\n}\n\ntype DriversStore struct{}\n\nfunc (s *DriversStore) Get(string) (Driver, bool) { return Driver{}, false }\n"
	if err := checkDriversStore([]byte(good)); err != nil {
		t.Fatal(err)
	}
	renamed := strings.Replace(good, "endpoint string", "address string", 1)
	if err := checkDriversStore([]byte(renamed)); err == nil {
		t.Error("a Driver without endpoint accepted")
	}
}
