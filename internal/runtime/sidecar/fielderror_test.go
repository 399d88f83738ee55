package sidecar

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Validate names fields, never flags: which flag sets a field is the front end's business.
func TestValidateNamesFields(t *testing.T) {
	valid := func() Options {
		return Options{CSIAddress: "/csi.sock", Timeout: time.Second, WorkerThreads: 1, RetryIntervalStart: time.Second, RetryIntervalMax: time.Minute,
			KubeAPIQPS: 5, KubeAPIBurst: 10, MetricsPath: "/metrics", Resync: time.Minute,
			LeaderElection: LeaderElection{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 5 * time.Second}}
	}
	t.Setenv("KUBECONFIG", "")
	o := valid()
	if err := o.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for field, mutate := range map[string]func(*Options){
		"CSIAddress":                 func(o *Options) { o.CSIAddress = "" },
		"Resync":                     func(o *Options) { o.Resync = 0 },
		"RetryIntervalMax":           func(o *Options) { o.RetryIntervalMax = time.Millisecond },
		"WorkerThreads":              func(o *Options) { o.WorkerThreads = 0 },
		"MetricsPath":                func(o *Options) { o.MetricsPath = "metrics" },
		"LeaderElection.RetryPeriod": func(o *Options) { o.LeaderElection.RetryPeriod = 0 },
	} {
		o := valid()
		mutate(&o)
		err := o.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field || !strings.Contains(err.Error(), field) || strings.Contains(err.Error(), "--") {
			t.Errorf("%s: got %v, want a *FieldError naming the field and no flag", field, err)
		}
	}
}

func TestRenameFields(t *testing.T) {
	err := fmt.Errorf("provisioner: %w", Invalid("RetryIntervalMax", "{RetryIntervalMax} (%s) must not be less than {RetryIntervalStart} (%s)", time.Second, 2*time.Second))
	if got, want := err.Error(), "provisioner: RetryIntervalMax (1s) must not be less than RetryIntervalStart (2s)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	renamed := RenameFields(err, map[string]string{"RetryIntervalMax": "--retry-interval-max", "RetryIntervalStart": "--retry-interval-start"})
	if got, want := renamed.Error(), "provisioner: --retry-interval-max (1s) must not be less than --retry-interval-start (2s)"; got != want {
		t.Errorf("renamed %q, want %q", got, want)
	}
	plain := errors.New("not a field error")
	if RenameFields(plain, nil) != plain {
		t.Error("an error that is not a FieldError was changed")
	}
}
