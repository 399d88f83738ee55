package csiclient

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MayBeInProgress reports whether a failed call may still be running, or may have done its
// work, in the driver: a timeout, a cancellation, a lost connection, an Aborted "operation
// pending", or an error that is not a gRPC status at all. Such a call must be retried until
// it gives a final answer; its effect cannot be assumed absent. This is the upstream
// sidecars' "in background" classification.
func MayBeInProgress(err error) bool {
	if err == nil {
		return false
	}
	s, ok := status.FromError(err)
	if !ok {
		return true
	}
	switch s.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.Aborted:
		return true
	}
	return false
}
