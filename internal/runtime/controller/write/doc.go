// Package write is the one way kubevol's controllers write API objects they watch: add or
// remove a finalizer, write an object's metadata or spec, write its status. Each component
// writes with the verb its upstream role grants on the resource (external-attacher and
// external-resizer only patch; external-provisioner and the snapshot roles update claims
// and snapshots), so a Writer is built with that verb. A refused write (controller.Refused)
// is reported through controller.WriteFailed, once, by the Writer.
//
// A patch is computed from the object read and the object wanted (a strategic merge patch,
// whose finalizer list directives never undo another writer's finalizer). Where a stale
// cache must not win, the patch carries the resourceVersion read (Checked), and the API
// server refuses it with a conflict as it would an update. What a controller does with a
// conflict is its Conflict policy, chosen by name.
package write
