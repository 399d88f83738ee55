package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string // substring of stderr
	}{
		{"version", []string{"version"}, exitOK, ""},
		{"unknown subcommand", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"unknown flag", []string{"up", "--no-such-flag"}, exitUsage, "unknown flag: --no-such-flag"},
		{"bad duration", []string{"up", "--status-interval=soon"}, exitUsage, "invalid argument"},
		{"too short interval", []string{"up", "--status-interval=1ms"}, exitUsage, "--status-interval must be at least 100ms"},
		{"empty dir", []string{"up", "--dir="}, exitUsage, "--dir must not be empty"},
		{"reset root", []string{"up", "--dir=/", "--reset"}, exitUsage, "refuses to wipe"},
		{"stray argument", []string{"up", "now"}, exitUsage, `unexpected argument "now"`},
		{"unknown runtime", []string{"up", "--runtime=docker"}, exitUsage, `--runtime "docker": want "containerd" or empty`},
		{"image without runtime", []string{"up", "--image=/tmp/x.tar"}, exitUsage, "--image and --e2e-images need --runtime containerd"},
		{"bad klog verbosity", []string{"version", "-v=loud"}, exitUsage, "invalid argument"},
		{"verify without a driver", []string{"verify"}, exitUsage, "give exactly one of --driver and --storage-class"},
		{"verify with both", []string{"verify", "--driver=a.b", "--storage-class=c"}, exitUsage, "give exactly one of --driver and --storage-class"},
		{"verify dir and kubeconfig", []string{"verify", "--driver=a.b", "--dir=/x", "--kubeconfig=/y"}, exitUsage, "give --dir or --kubeconfig, not both"},
		// Checked before the run, not after a run whose report would then be lost.
		{"verify junit in no directory", []string{"verify", "--driver=a.b", "--dir=/nonexistent-kubevol", "--wait=1s", "--junit=/nonexistent-kubevol/verify.xml"}, exitUsage, "--junit /nonexistent-kubevol/verify.xml"},
		{"verify only a part of a name", []string{"verify", "--driver=a.b", "--only=provision/,crash/node"}, exitUsage, `--only "crash/node" selects no case`},
		{"verify bad block parameters", []string{"verify", "--driver=a.b", "--block-parameters=type"}, exitUsage, "--block-parameters"},
		{"driver without unknown", []string{"driver", "--endpoint=unix:///x/csi.sock", "--node-id=n", "--state-dir=/tmp/x", "--without=staging,wings"}, exitUsage, `--without "wings": want some of staging,`},
		{"bench nodes zero nodes", []string{"bench", "nodes", "--nodes=10,0"}, exitUsage, "--nodes 0: want 1 to 1000 with --agents process"},
		{"bench nodes too many processes", []string{"bench", "nodes", "--nodes=1001"}, exitUsage, "--nodes 1001: want 1 to 1000 with --agents process"},
		{"bench nodes too many embedded", []string{"bench", "nodes", "--agents=library", "--nodes=5001"}, exitUsage, "--nodes 5001: want 1 to 5000 with --agents library"},
		{"bench nodes not a number", []string{"bench", "nodes", "--nodes=ten"}, exitUsage, "invalid argument"},
		{"bench nodes empty list", []string{"bench", "nodes", "--nodes="}, exitUsage, `invalid argument "" for "--nodes"`},
		{"bench nodes unknown agents", []string{"bench", "nodes", "--agents=docker"}, exitUsage, `--agents "docker": want process or library`},
		{"bench nodes no pods", []string{"bench", "nodes", "--pods-per-node=0"}, exitUsage, "--pods-per-node must be between 1 and 110, got 0"},
		{"bench nodes too many pods", []string{"bench", "nodes", "--pods-per-node=111"}, exitUsage, "--pods-per-node must be between 1 and 110, got 111"},
		{"bench nodes negative updates", []string{"bench", "nodes", "--updates=-1"}, exitUsage, "--updates must not be negative"},
		{"bench nodes short idle", []string{"bench", "nodes", "--idle=10ms"}, exitUsage, "--idle must be at least 1s"},
		{"bench nodes no timeout", []string{"bench", "nodes", "--timeout=0s"}, exitUsage, "--timeout must be positive"},
		{"driver node-only expansion split", []string{"driver", "--endpoint=unix:///x/csi.sock", "--node-id=n", "--state-dir=/tmp/x", "--mode=node", "--without=controller-expansion"}, exitUsage, "--without controller-expansion needs --mode all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Execute(tc.args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Fatalf("exit code = %d, want %d; stderr:\n%s", code, tc.wantCode, stderr.String())
			}
			if tc.wantErr == "" {
				return
			}
			first, _, _ := strings.Cut(stderr.String(), "\n")
			if !strings.Contains(first, tc.wantErr) {
				t.Errorf("first stderr line %q does not contain %q", first, tc.wantErr)
			}
		})
	}
}

func TestEverySubcommandHasHelp(t *testing.T) {
	root := NewRootCommand()
	for _, c := range root.Commands() {
		args := []string{c.Name(), "--help"}
		var stdout, stderr bytes.Buffer
		if code := Execute(args, &stdout, &stderr); code != exitOK {
			t.Errorf("kubevol %s --help: exit %d: %s", c.Name(), code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "Usage:") {
			t.Errorf("kubevol %s --help printed no usage:\n%s", c.Name(), stdout.String())
		}
	}
}

func TestVersionFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Execute([]string{"--version"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "kubevol ") {
		t.Errorf("--version printed %q", stdout.String())
	}
}
