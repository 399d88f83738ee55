package driver

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"
)

// tokenPrefix marks pagination tokens made by paginate, so that a token the driver never
// issued is recognised: CSI ListVolumes and ListSnapshots answer ABORTED to it.
const tokenPrefix = "from:"

// paginate returns the page of sorted ids that starts at token and holds at most max
// entries (0: all), and the token of the next page. A token names the first ID of its page,
// so a page survives the deletion of entries before it.
func paginate(ids []string, token string, maxEntries int32) (page []string, next string, err error) {
	if maxEntries < 0 {
		return nil, "", status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	start := 0
	if token != "" {
		first, ok := strings.CutPrefix(token, tokenPrefix)
		if !ok {
			return nil, "", status.Errorf(codes.Aborted, "invalid starting_token %q", token)
		}
		start = sort.SearchStrings(ids, first)
	}
	end := len(ids)
	if maxEntries > 0 && start+int(maxEntries) < end {
		end = start + int(maxEntries)
		next = tokenPrefix + ids[end]
	}
	return ids[start:end], next, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func wrapInt64(n int64) *wrapperspb.Int64Value { return wrapperspb.Int64(n) }

// klogFrom prefers the per-RPC logger the interceptor put into ctx, which carries the
// method and volume ID.
func klogFrom(ctx context.Context, fallback klog.Logger) klog.Logger {
	if l, err := logr.FromContext(ctx); err == nil {
		return l
	}
	return fallback
}

// errorCode keeps the code of an error that already carries one (a refusal such as
// RESOURCE_EXHAUSTED from a step of the call), and classifies any other as dataErrorCode.
func errorCode(err error) codes.Code {
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return dataErrorCode(err)
}

// dataErrorCode is the CSI code for a failure to write volume data or the records: a full
// disk or quota under the state directory is RESOURCE_EXHAUSTED, which a CO retries as it
// frees space; anything else is INTERNAL.
func dataErrorCode(err error) codes.Code {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return codes.ResourceExhausted
	}
	return codes.Internal
}
