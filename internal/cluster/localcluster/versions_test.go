package localcluster

import (
	"strings"
	"testing"
)

func TestParseRelease(t *testing.T) {
	goMod := `module k8s.io/kubernetes

require (
	go.etcd.io/etcd/server/v3 v3.6.4 // indirect
	k8s.io/api v0.0.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	example.com/other => example.com/other v1.0.0
)
`
	deps := `dependencies:
  - name: "coredns-kube-up"
    version: 1.12.1
  - name: "etcd"
    version: 3.6.5
    refPaths:
    - path: cluster/gce/manifests/etcd.manifest
  - name: "etcd-image"
    version: 3.6.5-0
`
	rel, err := parseRelease("v1.34.4", []byte(goMod), []byte(deps))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rel.Staging, ","); got != "k8s.io/api,k8s.io/client-go" {
		t.Errorf("staging modules %s", got)
	}
	// The etcd the release ships, not the test dependency of its go.mod.
	if rel.Etcd != "3.6.5" {
		t.Errorf("etcd %q, want 3.6.5", rel.Etcd)
	}
	mod := string(releaseGoMod(rel))
	for _, want := range []string{
		"module github.com/kubevol/kubevol/cmd/kubevol-cluster\n",
		"\tk8s.io/api => k8s.io/api v0.34.4\n",
		"\tk8s.io/client-go => k8s.io/client-go v0.34.4\n",
		"\tgo.etcd.io/etcd/server/v3 v3.6.5\n",
		"\tk8s.io/kubernetes v1.34.4\n",
		"\tgithub.com/kubevol/kubevol => ./kubevol-version\n",
	} {
		if !strings.Contains(mod, want) {
			t.Errorf("generated go.mod lacks %q:\n%s", want, mod)
		}
	}
	if _, err := parseRelease("v1.34.4", []byte(goMod), []byte("dependencies: []\n")); err == nil {
		t.Error("a release without etcd parsed")
	}
}

func TestLDFlagsStampTheRelease(t *testing.T) {
	got := ldFlags("v1.35.4")
	for _, want := range []string{"version.gitVersion=v1.35.4", "version.gitMinor=35 ", "version.gitMajor=1 "} {
		if !strings.Contains(got, want) {
			t.Errorf("ldflags %q lack %q", got, want)
		}
	}
}
