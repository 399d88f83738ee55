// Package intent is the provisioner's durable record of volumes it may have created on the
// backend but not yet handed to a PersistentVolume. A record is written, and waited for,
// before CreateVolume; it is dropped once the PV exists or the volume is deleted. After a
// crash, or when a claim is deleted while CreateVolume is in flight, the record says which
// backend volume to delete, which closes external-provisioner issue #486.
//
// # Where the records live
//
// The records form a journal kept in a few Lease objects (coordination.k8s.io) in the
// provisioner's namespace (--intent-namespace, by default the leader election's): the one
// kind of object external-provisioner's role lets it create and update besides PVs and
// events, so the guarantee needs no right beyond upstream's. A Lease's spec has no room
// for data, so each shard holds its records as JSON in one annotation; the API server caps
// an object's annotations at 256 KiB, so a shard takes records up to maxShardBytes and
// the next record goes to the next shard (kubevol-intent-<journal>-<n>). The journal's
// name is a hash of the driver and, for --node-deployment, the node: each node's instance
// loads and writes only its own shards, and one node's restart never cleans up another
// node's CreateVolume.
//
// # Group commit
//
// One writer writes the shards. A record that a CreateVolume waits for asks for a write at
// once; the records added while a write is under way go out together in the next one, so
// under load a write carries as many records as there are workers waiting, and a burst of
// provisions costs a fraction of a write per claim instead of the two claim updates a
// record on the claim cost. Dropping a record (its PV exists, or its volume is deleted)
// and learning its volume ID wait for the next write, or for lazyDelay at most: a record
// left behind by a crash only costs a check at the next start. Writes carry the shard's
// resourceVersion; on a conflict the writer reads the shard again and adopts the records
// it did not write and does not know (a previous leader's last write), so a record is
// never lost to a race, only kept longer than needed.
//
// # Claims and leaders
//
// The record is outside the claim, so the claim needs no finalizer: a claim deleted while
// its CreateVolume runs, or while no provisioner runs, goes at once, and its record still
// names the volume to delete. At start (each time this process becomes the leader) Load
// reads the journal; for each record the claim controller finds a PV of the driver for
// that claim and volume (the record is dropped), a live claim still waiting (it is
// provisioned again: CreateVolume is idempotent by name) or a claim that is gone (the
// recorded CreateVolume is repeated to learn the volume's ID, which is then deleted).
// While this process leads, its memory is the journal's truth: only the leader writes.
//
// # Without rights on Leases
//
// Where the Leases cannot be read or written (a role without them), the provisioner
// degrades to upstream's behaviour: the journal says so in one log line, records are kept
// in memory only, which covers a claim deleted while this process runs but not a crash,
// and each claim gets one log line and one event that say so.
//
// Claims that carry a record in the form of earlier releases (an annotation and a
// finalizer on the claim) are moved into the journal and released (legacy.go).
package intent
