package backend

import (
	"reflect"
	"testing"
)

func TestParseLosetupJSON(t *testing.T) {
	out := []byte(`{
   "loopdevices": [
      {"name": "/dev/loop0", "back-file": "/var/lib/kubevol/volumes/v-1.img"},
      {"name": "/dev/loop1", "back-file": "/tmp/x.img (deleted)"}
   ]
}`)
	got, err := ParseLosetupJSON(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []LoopDevice{{Name: "/dev/loop0", BackFile: "/var/lib/kubevol/volumes/v-1.img"}, {Name: "/dev/loop1", BackFile: "/tmp/x.img", Deleted: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, empty := range []string{"", "\n", "{\n   \"loopdevices\": [\n\n   ]\n}\n"} {
		if got, err := ParseLosetupJSON([]byte(empty)); err != nil || len(got) != 0 {
			t.Errorf("ParseLosetupJSON(%q) = %v, %v", empty, got, err)
		}
	}
	if _, err := ParseLosetupJSON([]byte("garbage")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestParseLosetupList(t *testing.T) {
	out := []byte("/dev/loop0: [65024]:9977924 (/tmp/zz.img (deleted))\n/dev/loop3: [2049]:12 (/var/lib/v.img), offset 0\nnoise\n")
	got := ParseLosetupList(out)
	want := []LoopDevice{{Name: "/dev/loop0", BackFile: "/tmp/zz.img", Deleted: true}, {Name: "/dev/loop3", BackFile: "/var/lib/v.img"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
