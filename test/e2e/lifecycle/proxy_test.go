package lifecycle

import (
	"net"
	"path"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// nodeProxy stands between the node agent and a driver: it forwards every call unchanged
// and keeps the NodePublishVolume requests in memory, so that a test knows what the agent
// sent (service-account tokens, secrets) without any process writing it anywhere.
type nodeProxy struct {
	mu        sync.Mutex
	published []*csi.NodePublishVolumeRequest
}

// startNodeProxy serves the proxy on the unix socket sock, forwarding to the driver at the
// unix:// address target, until the test ends.
func startNodeProxy(t *testing.T, sock, target string) *nodeProxy {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &nodeProxy{}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		var in []byte
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		if path.Base(method) == "NodePublishVolume" {
			req := &csi.NodePublishVolumeRequest{}
			if err := proto.Unmarshal(in, req); err == nil {
				p.mu.Lock()
				p.published = append(p.published, req)
				p.mu.Unlock()
			}
		}
		var out []byte
		if err := conn.Invoke(stream.Context(), method, &in, &out, grpc.ForceCodec(rawCodec{})); err != nil {
			return err // a status error: the agent sees the driver's code
		}
		return stream.SendMsg(&out)
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		_ = conn.Close()
	})
	return p
}

// publishedTo returns the NodePublishVolume requests whose target is target.
func (p *nodeProxy) publishedTo(target string) []*csi.NodePublishVolumeRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*csi.NodePublishVolumeRequest
	for _, r := range p.published {
		if r.GetTargetPath() == target {
			out = append(out, r)
		}
	}
	return out
}

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }
