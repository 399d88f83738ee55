package driver

import (
	"errors"
	"syscall"

	"google.golang.org/grpc/codes"
)

// storageCode is the code of a failed write of the driver's records or of volume data. A
// full filesystem or an exhausted quota under the state directory is RESOURCE_EXHAUSTED, as
// any lack of capacity, which the CO retries with backoff and reports as such; anything else
// is INTERNAL.
func storageCode(err error) codes.Code {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return codes.ResourceExhausted
	}
	return codes.Internal
}
