package cli

import (
	"context"
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/kubevol/kubevol/internal/component/snapshotter/conversion"
)

type conversionWebhookOptions struct {
	certFile, keyFile string
	port              int
	bindAddress       string
	automaxprocs      bool
}

func newConversionWebhookCommand() *cobra.Command {
	o := &conversionWebhookOptions{}
	cmd := &cobra.Command{
		Use:   "snapshot-conversion-webhook",
		Short: "The CRD conversion webhook of the group snapshot objects (v1, v1beta1, v1beta2)",
		Long: `snapshot-conversion-webhook replaces kubernetes-csi/external-snapshotter's snapshot-conversion-webhook,
with its flags. The API server calls it (HTTPS, POST /convert, a ConversionReview) to convert
groupsnapshot.storage.k8s.io objects between the versions the CRDs serve and the one they store:
a VolumeGroupSnapshotContent's status.volumeSnapshotInfoList (v1, v1beta2) becomes
status.volumeSnapshotHandlePairList (v1beta1) and back, the fields v1beta1 lacks kept in the
annotation ` + conversion.InfoListAnnotation + `. GET /readyz answers ok. The certificate
files are read again when they change. It needs no API access. ` + "`kubevol up`" + ` runs it and points
the VolumeGroupSnapshotContent CRD at it.`,
		// Upstream's binary has no --version.
		RunE: runSidecar(new(bool), o.validate, o.run),
	}
	f := cmd.Flags()
	f.StringVar(&o.certFile, "tls-cert-file", "", "File containing the x509 Certificate for HTTPS. (CA cert, if any, concatenated after server cert). Required.")
	f.StringVar(&o.keyFile, "tls-private-key-file", "", "File containing the x509 private key matching --tls-cert-file. Required.")
	f.IntVar(&o.port, "port", 443, "Secure port that the webhook listens on")
	f.StringVar(&o.bindAddress, "bind-address", "", "IP address the webhook listens on; empty means every address, as upstream (kubevol only)")
	f.BoolVar(&o.automaxprocs, "automaxprocs", false, "Set GOMAXPROCS from the container's CPU quota.")
	noEffect(f, reasonAutomaxprocs, "automaxprocs")
	return cmd
}

func (o *conversionWebhookOptions) validate() error {
	switch {
	case o.certFile == "":
		return usageErrorf("--tls-cert-file must be specified")
	case o.keyFile == "":
		return usageErrorf("--tls-private-key-file must be specified")
	case o.port < 1 || o.port > 65535:
		return usageErrorf("--port %d: want 1-65535", o.port)
	case o.bindAddress != "" && net.ParseIP(o.bindAddress) == nil:
		return usageErrorf("--bind-address %q is not an IP address", o.bindAddress)
	}
	return nil
}

func (o *conversionWebhookOptions) run(ctx context.Context) error {
	l, err := net.Listen("tcp", net.JoinHostPort(o.bindAddress, strconv.Itoa(o.port)))
	if err != nil {
		return err
	}
	return conversion.Serve(ctx, l, o.certFile, o.keyFile)
}
