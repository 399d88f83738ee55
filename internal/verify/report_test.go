package verify

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"
)

func sampleReport() *Report {
	return &Report{Driver: "x.example.com", Duration: 42 * time.Second, Results: []Result{
		{Name: "provision/wffc", Outcome: Passed, Duration: 1500 * time.Millisecond},
		{Name: "block/raw", Outcome: Failed, Duration: 2 * time.Second, Detail: "volumes of pod writer not ready\nevent ProvisioningFailed on persistentvolumeclaim/dev: rpc error: code = Internal"},
		{Name: "attach/detach", Outcome: NotApplicable, Detail: "CSIDriver attachRequired is false"},
	}}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"CASE", "provision/wffc", "passed", "1.5s",
		"block/raw", "FAILED", "volumes of pod writer not ready",
		"  event ProvisioningFailed on persistentvolumeclaim/dev", // the explanation, on its own line
		"attach/detach", "not applicable", "CSIDriver attachRequired is false",
		"1 passed, 1 failed, 1 not applicable in 42.0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !sampleReport().Failed() {
		t.Error("a report with a failed case is not Failed")
	}
}

func TestJUnit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junit.xml")
	if err := sampleReport().WriteJUnit(path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc junitSuites
	if err := xml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("not XML: %v\n%s", err, raw)
	}
	s := doc.Suites[0]
	if s.Tests != 3 || s.Failures != 1 || s.Skipped != 1 {
		t.Errorf("suite counts tests=%d failures=%d skipped=%d, want 3, 1, 1", s.Tests, s.Failures, s.Skipped)
	}
	if f := s.Cases[1].Failure; f == nil || !strings.Contains(f.Body, "ProvisioningFailed") || strings.Contains(f.Message, "\n") {
		t.Errorf("failure = %+v, want a one-line message and the explanation in the body", f)
	}
	if sk := s.Cases[2].Skipped; sk == nil || !strings.Contains(sk.Message, "attachRequired") {
		t.Errorf("skipped = %+v, want the reason", sk)
	}
}

// Cases the capabilities rule out are not applicable with the reason; unknown
// capabilities (no socket) let every case run.
func TestApplicability(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	none := storagev1.NoneFSGroupPolicy
	known := func(ctrl []csi.ControllerServiceCapability_RPC_Type, node []csi.NodeServiceCapability_RPC_Type, online, offline bool) capabilities {
		c := capabilities{known: true, controller: map[csi.ControllerServiceCapability_RPC_Type]bool{},
			node: map[csi.NodeServiceCapability_RPC_Type]bool{}, online: online, offline: offline}
		for _, x := range ctrl {
			c.controller[x] = true
		}
		for _, x := range node {
			c.node[x] = true
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		caseFor string
		env     *env
		want    string // substring of the reason, "" for applicable
	}{
		{"no socket: attach by CSIDriver", "attach/detach", &env{csiDriver: &storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{AttachRequired: yes}}}, ""},
		{"attach not required", "attach/detach", &env{csiDriver: &storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{AttachRequired: no}}}, "attachRequired is false"},
		{"attach required, no PUBLISH", "attach/detach", &env{csiDriver: &storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{AttachRequired: yes}}, caps: known(nil, nil, false, false)}, "PUBLISH_UNPUBLISH_VOLUME"},
		{"fsGroup None", "access/fsgroup", &env{root: "/r", csiDriver: &storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{FSGroupPolicy: &none}}}, "fsGroupPolicy is None"},
		{"host case elsewhere", "data/persist", &env{csiDriver: &storagev1.CSIDriver{}}, "needs the node's host"},
		{"no expansion at all", "expand/online", &env{csiDriver: &storagev1.CSIDriver{}, caps: known(nil, nil, false, false)}, "neither controller nor node EXPAND_VOLUME"},
		{"node-only expansion", "expand/online", &env{csiDriver: &storagev1.CSIDriver{}, caps: known(nil, []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_EXPAND_VOLUME}, false, false)}, ""},
		{"offline only", "expand/online", &env{csiDriver: &storagev1.CSIDriver{}, caps: known([]csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_EXPAND_VOLUME}, nil, false, true)}, "OFFLINE volume expansion only"},
		{"online only", "expand/offline", &env{csiDriver: &storagev1.CSIDriver{}, caps: known([]csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_EXPAND_VOLUME}, nil, true, false)}, "ONLINE volume expansion only"},
		{"no snapshots", "snapshot/restore", &env{csiDriver: &storagev1.CSIDriver{}, caps: known(nil, nil, false, false)}, "CREATE_DELETE_SNAPSHOT"},
		{"no clone", "clone", &env{csiDriver: &storagev1.CSIDriver{}, caps: known(nil, nil, false, false)}, "CLONE_VOLUME"},
		{"no inline mode", "ephemeral/inline", &env{csiDriver: &storagev1.CSIDriver{}}, "no Ephemeral"},
		{"no restart command", "crash/driver-restart", &env{csiDriver: &storagev1.CSIDriver{}}, "--restart-driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *testCase
			for _, x := range allCases() {
				if x.name == tc.caseFor {
					c = x
				}
			}
			if c == nil {
				t.Fatalf("no case %s", tc.caseFor)
			}
			got := tc.env.applies(c)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("applies = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSelected(t *testing.T) {
	for _, tc := range []struct {
		only []string
		want string
	}{
		{[]string{"expand/", "leftovers"}, "expand/offline,expand/online,expand/online-block,leftovers"},
		// A case's name selects that case only, not the cases it is a prefix of.
		{[]string{"expand/online"}, "expand/online"},
		{[]string{"clone"}, "clone"},
		{[]string{"clone/"}, "clone/larger"},
		{[]string{"crash/node-agent", "provision/"}, "provision/immediate,provision/wffc,crash/node-agent"},
		{[]string{"crash/node"}, ""},
		{[]string{"online"}, ""},
	} {
		var names []string
		for _, c := range selected(allCases(), tc.only) {
			names = append(names, c.name)
		}
		if strings.Join(names, ",") != tc.want {
			t.Errorf("selected(%q) = %v, want %s", tc.only, names, tc.want)
		}
	}
}

func TestCheckOnly(t *testing.T) {
	if err := CheckOnly([]string{"expand/", "expand/online", "multinode/", "leftovers"}); err != nil {
		t.Errorf("CheckOnly of case names and groups: %v", err)
	}
	err := CheckOnly([]string{"provision/", "crash/node", "online"})
	if err == nil || !strings.Contains(err.Error(), `"crash/node", "online" selects no case`) || !strings.Contains(err.Error(), "crash/node-agent") {
		t.Errorf("CheckOnly of parts of names: %v, want both refused and the cases listed", err)
	}
}
