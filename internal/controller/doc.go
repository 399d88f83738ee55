// Package controller is the runtime every kubevol controller is built on, in the shape of
// client-go's sample-controller: sources fill caches and enqueue keys, a typed rate-limited
// queue holds the keys, workers call one sync function per key, and a Runner starts the
// sources, waits for them to sync, runs the workers and drains them on shutdown.
//
// A controller is one file: build its queue with NewQueue, register its event handlers on
// its sources, and hand the queue and its sync function to Handle. The sync function is
// level-triggered: it reads the current state and converges it, and tells the runtime what
// to do with the key by what it returns:
//
//   - nil: done, the key's backoff is forgotten;
//   - RetryAfter(d): look again after d (for example, a write of ours the cache has not
//     shown yet), with the backoff forgotten;
//   - any other error: retry with the key's own exponential backoff.
//
// A Source is anything that can start and report synced: a shared informer factory
// (Informers), or a set of per-object watches. A Runner with no source at all serves a
// queue fed by hand (a worker over pod UIDs, for example).
//
// # Writes of ours the cache has not shown yet
//
// Writes remembers, per key, a write of this process (or a fact only this process knows)
// until the cache catches up. It keeps these guarantees, each tested in writes_test.go:
//
//  1. One mark per key, the latest wins: Expect replaces an older mark of the same key, so
//     only the last write's version is waited for.
//  2. Is matches only a mark that exists and has the very same version: a key without a
//     mark never matches, not even an object without a resourceVersion.
//  3. Observe clears a mark only when the cache shows the version that was written; an
//     older version, delivered late, leaves the mark in place.
//  4. ExpectUnless checks the cache under the tracker's lock: an informer stores an object
//     before it calls the handler that clears the mark, so a write the cache shows just
//     after the check is still cleared by its handler, and one it shows before is never
//     marked. No interleaving leaves a stale mark behind.
//  5. With a Window, a mark expires: Pending turns false and Remaining zero once the window
//     has passed, so a lost event delays a key by at most the window, never forever.
//     Remaining is the time left, for RetryAfter.
//  6. Take reads and clears a mark at once, so a one-shot request (publish again) is acted
//     on by exactly one sync; a sync that fails puts it back with Expect.
//  7. Forget drops the mark of a key whose object is gone, so an object re-created under
//     the same name starts clean.
//  8. Safe for concurrent use by workers and event handlers; the zero value is ready.
//  9. Marks live in memory only: after a restart the tracker is empty, so a mark must only
//     ever save work (an API call, a driver call) that is safe to repeat.
package controller
