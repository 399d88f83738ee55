// Package controller is the runtime every kubevol controller is built on, in the shape of
// client-go's sample-controller: sources fill caches and enqueue keys, a typed rate-limited
// queue holds the keys, workers call one sync function per key, and a Runner starts the
// sources, waits for them to sync, runs the workers and drains them on shutdown.
//
// A controller builds its queue with NewQueue, registers its event handlers on its sources,
// and hands the queue and its sync function to Handle. The sync function is
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
// Superseded records, per key, each write of this process (the resourceVersion it wrote
// over and the one it produced) until the informer delivers past it, so that a sync
// reading a version already written over waits for the next delivery instead of acting on
// a state left behind. Flags is a plain set of keys, with an optional expiry, for facts
// only this process knows (a sync in progress, a final driver error, a one-shot request).
// Both live in memory only: after a restart they are empty, so they must only ever save
// work that is safe to repeat. Their tests say what each guarantees. The writes
// themselves go through package write.
package controller
