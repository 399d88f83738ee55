package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubevol/kubevol/internal/verify"
)

type verifyOptions struct {
	o               verify.Options
	junit           string
	blockParameters string
	modifyParams    string
	infeasibleMod   string
}

// errCasesFailed makes verify exit 1 after printing its table.
var errCasesFailed = errors.New("some cases failed")

func newVerifyCommand() *cobra.Command {
	o := verifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify [--driver NAME | --storage-class NAME] [--dir UP_DIR | --kubeconfig FILE] [--junit FILE]",
		Short: "Check a CSI driver's whole Kubernetes volume lifecycle against a running kubevol up",
		Long: `verify runs, against a running ` + "`kubevol up`" + `, the Kubernetes volume lifecycle that a CSI driver's
capabilities allow, each case in a namespace of its own that it deletes afterwards: provisioning
(Immediate and WaitForFirstConsumer, with topology), data through the pod's mount path read back by
the next pod, access modes (ReadWriteOncePod, readOnly, fsGroup), raw block, inline and generic
ephemeral volumes, attach and detach, offline and online expansion seen inside the mount, snapshot
restore and clone, kill -9 of the node agent while mounted, a driver restart (--restart-driver),
reclaim Delete and Retain, shared claims, subPaths, fsGroupChangePolicy, large files, several volumes per
pod, PV fields and mount options, CSIStorageCapacity, volume limits and their refresh
(--max-volumes-command), SELinux context mounts (on an SELinux host), snapshot semantics (overwrite,
Retain, pre-provisioned), larger restores and clones, pods deleted while the node agent is down,
volume modification by a VolumeAttributesClass (--modify-parameters) with an infeasible class and
its rollback, and nothing left behind.

The driver's capabilities come from its CSIDriver object and, when its socket is on this machine,
from the driver itself. A case they do not allow is "not applicable", with the reason; so is a case
that needs the node's host (mount paths, processes) when the cluster is not a kubevol up of this
machine (--kubeconfig). It prints a table, exits 1 when a case failed, and writes JUnit XML with
--junit. Cases: ` + strings.Join(verify.CaseNames(), ", ") + `. See docs/verify.md.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("dir") && o.o.Kubeconfig != "" {
				return usageErrorf("give --dir or --kubeconfig, not both")
			}
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.o.Driver, "driver", "", "CSI driver to verify (its StorageClass: the default class if it is the driver's, else the first by name)")
	f.StringVar(&o.o.StorageClass, "storage-class", "", "StorageClass whose provisioner is the driver to verify, and whose parameters the cases use")
	f.StringVar(&o.o.Dir, "dir", "/var/lib/kubevol/up", "state directory of the kubevol up to verify against, as kubevol up takes it")
	f.StringVar(&o.o.Kubeconfig, "kubeconfig", "", "kubeconfig of a cluster that is not a kubevol up of this machine (the host cases are then not applicable, unless --node-root-dir)")
	f.StringVar(&o.o.NodeRootDir, "node-root-dir", "", "with --kubeconfig, the root directory on this machine of the node's kubelet (its --root-dir) or node agent, for the host cases")
	f.StringVar(&o.junit, "junit", "", "also write the results as JUnit XML to this file")
	f.StringVar(&o.o.RestartDriver, "restart-driver", "", "shell command that restarts the driver, for the driver-restart case (e.g. \"systemctl restart my-csi\")")
	f.StringVar(&o.o.MaxVolumesCommand, "max-volumes-command", "", "shell command that makes the driver's NodeGetInfo report the max_volumes_per_node in $KUBEVOL_VERIFY_MAX_VOLUMES, for the allocatable refresh case (e.g. \"echo $KUBEVOL_VERIFY_MAX_VOLUMES > /etc/my-csi/max-volumes\")")
	f.StringVar(&o.blockParameters, "block-parameters", "", "key=value,... StorageClass parameters added for the raw block and filesystem size cases, so that their volumes have a device or filesystem of their own (default for *.kubevol.io drivers: type=block)")
	f.StringVar(&o.modifyParams, "modify-parameters", "", "key=value,... parameters of a VolumeAttributesClass the driver accepts, for the modification cases (default for *.kubevol.io drivers: readOnly=true)")
	f.StringVar(&o.infeasibleMod, "infeasible-modify-parameters", "", "key=value,... parameters the driver refuses with INVALID_ARGUMENT, for the infeasible modification case (default: a key no driver knows)")
	f.StringSliceVar(&o.o.MountOptions, "mount-options", nil, "mount options the driver supports, for the pv/fields case, which checks them on the mount (default: the StorageClass's; for *.kubevol.io drivers: noatime)")
	f.IntVar(&o.o.Parallel, "parallel", 3, "cases run at once (those that kill or restart a component always run alone)")
	f.DurationVar(&o.o.Timeout, "timeout", 3*time.Minute, "time limit of each case")
	f.DurationVar(&o.o.Wait, "wait", 5*time.Minute, "how long to wait for the cluster to be ready and the driver registered, counted from when the kubevol up of --dir stops saying (<dir>/up-status.json) that it is building its control plane or starting")
	f.StringSliceVar(&o.o.Only, "only", nil, `run only these cases: each a case's name, or a prefix ending in "/" for a group (expand/ is expand/offline, expand/online and expand/online-block)`)
	return cmd
}

func (o *verifyOptions) validate() error {
	if (o.o.Driver == "") == (o.o.StorageClass == "") {
		return usageErrorf("give exactly one of --driver and --storage-class")
	}
	if o.o.Parallel < 1 {
		return usageErrorf("--parallel must be at least 1, got %d", o.o.Parallel)
	}
	if o.o.Timeout <= 0 {
		return usageErrorf("--timeout must be positive, got %s", o.o.Timeout)
	}
	if o.o.Wait <= 0 {
		return usageErrorf("--wait must be positive, got %s", o.o.Wait)
	}
	if err := verify.CheckOnly(o.o.Only); err != nil {
		return usageErrorf("--only %v", err)
	}
	if o.junit != "" {
		if err := checkWritable(o.junit); err != nil {
			return usageErrorf("--junit %s: %v", o.junit, err)
		}
	}
	for _, p := range []struct {
		flag, value string
		into        *map[string]string
	}{
		{"block-parameters", o.blockParameters, &o.o.BlockParameters},
		{"modify-parameters", o.modifyParams, &o.o.ModifyParameters},
		{"infeasible-modify-parameters", o.infeasibleMod, &o.o.InfeasibleModifyParameters},
	} {
		if p.value == "" {
			continue
		}
		*p.into = map[string]string{}
		for _, kv := range strings.Split(p.value, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usageErrorf("--%s %q: want key=value,...", p.flag, p.value)
			}
			(*p.into)[k] = v
		}
	}
	return nil
}

func (o *verifyOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	o.o.Progress = stderr
	rep, err := verify.Run(ctx, o.o)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if o.junit != "" {
		if err := rep.WriteJUnit(o.junit); err != nil {
			return fmt.Errorf("--junit: %w", err)
		}
	}
	if rep.Failed() {
		return errCasesFailed
	}
	return nil
}

// checkWritable fails when path cannot be written, so that a run's report is not lost at
// its end. An existing file is opened without truncation; one created here is removed.
func checkWritable(path string) error {
	_, statErr := os.Lstat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	}
	_ = f.Close()
	if errors.Is(statErr, os.ErrNotExist) {
		_ = os.Remove(path)
	}
	return nil
}
