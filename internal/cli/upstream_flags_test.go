package cli

import (
	"strings"
	"testing"
)

// upstreamFlags are the flag names each upstream binary registers, as read from its module
// source (external-provisioner v6.4.0 and external-snapshotter v8.7.0, cmd/*) and from
// external-attacher v4.12's and external-resizer v2.1's main packages.
var upstreamFlags = map[string]string{
	"csi-provisioner": standardFlags + loggingFlags + `automaxprocs master volume-name-prefix volume-name-uuid-length
		retry-interval-start retry-interval-max worker-threads cloning-protection-threads snapshot-orphan-sweep-interval
		capacity-threads timeout strict-topology immediate-topology extra-create-metadata enable-pprof default-fstype
		kube-api-capacity-qps kube-api-capacity-burst enable-capacity capacity-for-immediate-binding capacity-poll-interval
		capacity-ownerref-level node-deployment node-deployment-immediate-binding node-deployment-base-delay
		node-deployment-max-delay controller-publish-readonly prevent-volume-mode-conversion feature-gates`,
	"csi-attacher": standardFlags + loggingFlags + `automaxprocs resync timeout retry-interval-start retry-interval-max
		worker-threads max-entries default-fstype reconcile-sync max-grpc-log-length feature-gates`,
	"csi-resizer": loggingFlags + `automaxprocs master kubeconfig resync-period workers csi-address timeout version extra-modify-metadata
		retry-interval-start retry-interval-max leader-election leader-election-namespace leader-election-lease-duration
		leader-election-renew-deadline leader-election-retry-period metrics-address http-endpoint metrics-path
		kube-api-qps kube-api-burst handle-volume-inuse-error feature-gates`,
	"csi-snapshotter": standardFlags + loggingFlags + `automaxprocs resync-period snapshot-name-prefix
		snapshot-name-uuid-length worker-threads timeout extra-create-metadata retry-interval-start retry-interval-max
		node-deployment groupsnapshot-name-prefix groupsnapshot-name-uuid-length feature-gates`,
	"snapshot-controller": loggingFlags + `automaxprocs kubeconfig resync-period version worker-threads leader-election
		leader-election-namespace leader-election-lease-duration leader-election-renew-deadline
		leader-election-retry-period kube-api-qps kube-api-burst http-endpoint metrics-path retry-interval-start
		retry-interval-max enable-distributed-snapshotting prevent-volume-mode-conversion retry-crd-interval-max
		feature-gates`,
	"snapshot-conversion-webhook": loggingFlags + `automaxprocs tls-cert-file tls-private-key-file port`,
}

const (
	// csi-lib-utils' standardflags.RegisterCommonFlags.
	standardFlags = `version kubeconfig csi-address leader-election leader-election-namespace
		leader-election-lease-duration leader-election-renew-deadline leader-election-retry-period leader-election-labels
		kube-api-qps kube-api-burst http-endpoint metrics-address metrics-path `
	// component-base's logsapi.AddFlags (with the JSON format registered).
	loggingFlags = `v vmodule logging-format log-flush-frequency log-text-split-stream log-text-info-buffer-size
		log-json-split-stream log-json-info-buffer-size `
)

func TestEveryUpstreamFlagIsRegistered(t *testing.T) {
	for name, flags := range upstreamFlags {
		cmd := entrypoints[name]()
		setupRoot(cmd)
		for _, f := range strings.Fields(flags) {
			if lookupFlag(cmd, f) == nil {
				t.Errorf("%s has no --%s", name, f)
			}
		}
	}
}
