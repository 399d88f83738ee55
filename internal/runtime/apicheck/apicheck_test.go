package apicheck

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
)

var (
	pvcs    = Resource{"v1", "persistentvolumeclaims"}
	classes = Resource{"storage.k8s.io/v1", "volumeattributesclasses"}
	groups  = Resource{"groupsnapshot.storage.k8s.io/v1", "volumegroupsnapshots"}
)

// server is a fake discovery of an apiserver of the given version serving lists.
func server(v string, lists ...*metav1.APIResourceList) *fakediscovery.FakeDiscovery {
	return &fakediscovery.FakeDiscovery{
		Fake:               &k8stesting.Fake{Resources: lists},
		FakedServerVersion: &version.Info{GitVersion: v},
	}
}

func list(gv string, names ...string) *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: gv}
	for _, n := range names {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
	}
	return l
}

func TestCheckTurnsOffWhatIsNotServed(t *testing.T) {
	// A 1.33 apiserver: storage.k8s.io/v1 without VolumeAttributesClass, no group snapshots.
	d := server("v1.33.0", list("v1", "persistentvolumeclaims", "persistentvolumes"), list("storage.k8s.io/v1", "storageclasses", "csinodes"))
	res, err := Check(d, "resizer", []Resource{pvcs}, []Feature{
		{Name: "modify", Needs: []Resource{classes}},
		{Name: "group snapshots", Needs: []Resource{groups}},
		{Name: "topology", Needs: []Resource{{"storage.k8s.io/v1", "csinodes"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.On("modify") || res.On("group snapshots") || !res.On("topology") {
		t.Errorf("off: %+v", res.Off)
	}
	line := res.Line("resizer")
	want := "resizer: Kubernetes v1.33.0 lacks APIs, turned off: modify (no storage.k8s.io/v1 volumeattributesclasses); group snapshots (no groupsnapshot.storage.k8s.io/v1 volumegroupsnapshots)"
	if line != want || strings.Contains(line, "\n") {
		t.Errorf("line\n%q, want\n%q", line, want)
	}
}

func TestCheckAllServed(t *testing.T) {
	d := server("v1.37.2", list("v1", "persistentvolumeclaims"), list("storage.k8s.io/v1", "volumeattributesclasses"))
	res, err := Check(d, "provisioner", []Resource{pvcs}, []Feature{{Name: "VolumeAttributesClass", Needs: []Resource{classes}}})
	if err != nil || len(res.Off) != 0 || !res.On("VolumeAttributesClass") {
		t.Fatalf("%+v %v", res, err)
	}
	if got := res.Line("provisioner"); got != "provisioner: Kubernetes v1.37.2 serves every API it uses" {
		t.Errorf("line %q", got)
	}
}

func TestCheckRequiredMissing(t *testing.T) {
	d := server("v1.12.0", list("v1", "persistentvolumeclaims"))
	_, err := Check(d, "attacher", []Resource{pvcs, {"storage.k8s.io/v1", "volumeattachments"}}, nil)
	want := "attacher cannot run on Kubernetes v1.12.0: it does not serve storage.k8s.io/v1 volumeattachments"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestCheckDiscoveryFailure(t *testing.T) {
	d := server("v1.37.2")
	d.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := Check(d, "resizer", []Resource{pvcs}, nil); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error %v", err)
	}
}
