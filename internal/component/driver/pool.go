package driver

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// pool is the space of one state directory. The controller's volumes and snapshots, the
// node's inline ephemeral volumes and the quarantine all draw on it, so that no kind of
// volume can fill the host behind the others' back.
//   - dir: the configured capacity, minus what every record holds and the quarantine.
//   - block: real space. Images are sparse, so the free space of the host filesystem is
//     reduced by what the existing images may still grow into; the pool never overcommits.
//
// A check and the record that takes the space happen under mu (held before the record
// owner's own lock), so two calls cannot both take the last bytes. In a split deployment
// each process has its own mu and reads the other's records from disk: two calls in two
// processes may then overbook by the size of one volume.
type pool struct {
	mu       sync.Mutex
	capacity int64
	// fsPath is a directory on the host filesystem that holds the images.
	fsPath string
	// quarantined is what the quarantine held when it was last measured (at start-up).
	quarantined, quarantinedEntries atomic.Int64
}

// hold is space one record takes from the pool.
type hold struct {
	bytes int64
	// image is the sparse file of a block volume: only the part not yet allocated is
	// subtracted from the host filesystem's free space.
	image string
}

// free is what a new volume or snapshot of type typ may still use, given every record's
// holds of that type: the controller's and the node's (see controller.freeLocked and
// node.free, which gather them).
func (p *pool) free(typ string, all []hold) (int64, error) {
	if typ == state.TypeDir {
		used := satAdd(0, p.quarantined.Load())
		for _, h := range all {
			used = satAdd(used, h.bytes)
		}
		return max(0, p.capacity-used), nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(p.fsPath, &fs); err != nil {
		return 0, err
	}
	free := satMul(int64(fs.Bavail), fs.Bsize)
	for _, h := range all {
		// An image being created (still under its partial name) or copied has nothing
		// allocated under its final name yet: it holds all of its bytes.
		alloc, err := backend.AllocatedBytes(h.image)
		if err != nil {
			alloc = 0
		}
		free -= max(0, h.bytes-alloc)
	}
	return max(0, free), nil
}

// fits fails with RESOURCE_EXHAUSTED unless size more bytes of type typ fit beside all
// (INTERNAL if the host filesystem cannot be read). The caller holds mu and records the
// space before it releases it.
func (p *pool) fits(typ string, size int64, all []hold) error {
	free, err := p.free(typ, all)
	if err != nil {
		return status.Errorf(codes.Internal, "capacity: %v", err)
	}
	if size > free {
		return status.Errorf(codes.ResourceExhausted, "not enough space in the %s pool: %d bytes requested, %d available", typ, size, free)
	}
	return nil
}

// satAdd adds two non-negative sizes, saturating at the largest int64 instead of wrapping
// to a negative number.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return maxSize
}

func satMul(a, b int64) int64 {
	if a != 0 && b > maxSize/a {
		return maxSize
	}
	return a * b
}
