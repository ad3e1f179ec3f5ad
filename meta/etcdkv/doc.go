// Package etcdkv stores sluice's metadata in an etcd cluster: a meta.KV
// whose commits are replicated by raft to a quorum of etcd members, so that
// the metadata survives the loss of a machine (issue 18). Volumes live on
// it: `sluice mkfs --meta etcd://HOST:PORT,.../PREFIX` (ParseURL) formats
// one, and package volume opens it from the volume directory's pointer
// file. One host at a time writes a prefix: the one that owns the volume
// through an etcd lease (Acquire; see "Ownership").
//
// # Cluster settings
//
// Start every member with --max-txn-ops=16384 --max-request-bytes=4194304
// (VolumeMaxTxnOps, VolumeMaxRequestBytes): an engine transaction frees or
// converts every extent of one file at once. Check, which mkfs and every
// open run, refuses a cluster with lower limits, naming the flag.
//
// # Keys
//
// A volume's keys live under Options.Prefix: key k is stored as the etcd key
// Prefix+k, and Scan(start, end) reads the etcd range [Prefix+start,
// Prefix+end). etcd orders keys bytewise, as Pebble's default comparer
// does, so scans return keys in bytes.Compare order. Values are stored
// exactly as given: the schema's records keep their format byte and CRC-32C,
// and a value damaged anywhere on the way fails to decode with
// meta.ErrCorrupt.
//
// Two keys under the prefix are the KV's own: OwnerKey ("owner") and
// LastOwnerKey ("owner.last"). The schema's keys begin with an
// upper-case kind byte, so they never collide; scans (of the KV, its
// Snapshots and its Txns) skip them, so that the volume's key space is
// the schema's alone.
//
// # Reads
//
// KV.Get and KV.Scan are linearizable reads: they see every commit that
// returned before they started. A Scan is read in pages of
// Options.ScanPageSize keys, every page at the revision of the first, so a
// scan sees one consistent state however long it runs.
//
// # Read cache
//
// While the KV owns the volume (from Acquire until the Owner is released
// or lost), it is the prefix's only writer: every change reaches etcd
// through its own commits. So it keeps what it read and wrote: KV.Get of a
// key read or written before, and KV.Scan of a range read whole before
// (and Get of a key absent from such a range), are answered from memory
// without a round trip, and still see every commit that returned before
// they started, as linearizable reads do. While a commit is in flight
// (etcd may hold it already) none of its keys is served from memory; a
// commit that succeeds writes its keys through, at its revision, before
// it returns; a read from etcd
// fills the cache only with what is newer than what the cache holds (a
// commit may overtake it), and only if the cache was not emptied in the
// meantime (its generation). The cache holds at most
// Options.ReadCacheEntries keys; one that has no room for a fill empties
// itself whole and starts a new generation, so that no complete range
// loses keys and no fill read before a commit can put back the state the
// commit replaced. It is emptied and turned off when the Owner is
// released or lost, when a commit's outcome is unknown (it may yet be
// applied), when a commit finds that another writer moved the owner's
// guard, and at Close; and it serves nothing once the Owner's deadline has
// passed (etcd not answering the keep-alives: the lease may have expired
// and another host may write), until a keep-alive is answered again. A
// caller that knows a range is empty (the engine, of a directory it has
// just made) says so with KnownEmpty (meta.EmptyHinter), which makes it a
// complete range. A Txn's reads and Snapshots always read etcd, at their
// revision. The cache's hits are counted in Stats.CacheHits.
//
// # Transactions
//
// A Txn is optimistic and serializable. Its reads are made at one revision
// (the revision of its first read, so its body sees one consistent state)
// and recorded: every key it read with the revision at which that key was
// last modified (0 when it was absent), every range it scanned. Its writes
// are buffered (reads through the Txn see them, as Pebble's indexed batches
// do; a key written twice keeps the last write). Commit sends one etcd
// transaction that applies the writes only if nothing it read has changed:
//
//	If(ModRevision(key) == recorded, for every key read;
//	   ModRevision(range) < readRevision+1, for every range scanned,
//	   which catches keys inserted into it)
//	Then(the puts and deletes)
//
// A scan that its callback stopped records only the part it delivered.
// When the comparison fails, Commit returns an error wrapping ErrConflict
// and writes nothing. A Txn cannot run its caller's logic again, so the
// retry is the caller's: start a new Txn and re-run the transaction body,
// a bounded number of times. A Txn that only read commits without a round
// trip: its reads were one consistent state.
//
// etcd applies a transaction whole or not at all, and refuses one with more
// than --max-txn-ops comparisons or operations, or a request larger than
// --max-request-bytes. Commit never splits a transaction: it checks the
// limits (Options.MaxTxnOps, Options.MaxRequestBytes, which must not
// exceed the server's) first and fails with an error wrapping
// ErrTxnTooLarge that names the limit and the numbers; a server with lower
// limits gives the same error.
//
// # Snapshots
//
// A Snapshot remembers the revision current when it was taken and reads at
// it. etcd keeps old revisions only until it compacts them (the cluster's
// --auto-compaction-* settings, or an explicit compaction): a snapshot
// whose revision has been compacted fails every read with an error
// wrapping ErrCompacted. A Txn whose read revision is compacted fails the
// same way.
//
// # Durability
//
// An etcd commit returns once a quorum of members has written it to its
// write-ahead log (fsynced) and it has been applied, so every
// committed transaction is already durable on a quorum of machines: the
// sync argument of Commit is ignored and Sync does nothing.
//
// # Errors
//
// Every etcd call is bounded by Options.RequestTimeout. Commit asks etcd to
// refuse the request when the member knows no leader (it has noticed the
// leader is gone, or the cluster has no quorum) and sends it again until
// the timeout: such a refusal
// says the transaction was not applied, and the error says "not applied".
// An error from etcd or the network is returned wrapped in an *OpError,
// which names the operation and the key, keeps the cause in the chain
// (errors.Is works with context.DeadlineExceeded, etcd's rpctypes errors,
// ErrConflict, ErrNotOwner, ...) and also matches syscall.EIO, so the
// engine reports it as an I/O error whatever the cause carries. A Commit
// that fails with anything but ErrConflict, ErrNotOwner, ErrTxnTooLarge or
// "not applied" may or may not have been applied (the request may have
// reached raft before the connection or the timeout ran out): the error
// says "outcome unknown". It was applied whole or not at all and, with an
// Owner, only while this host owned the volume; the engine shuts down on
// it, and the next open reads whichever state etcd has. An owned KV
// resolves most such outcomes instead (next section). Only Get of an
// absent key returns meta.ErrNotFound.
//
// # Outcomes
//
// A commit in flight when the member it went through stops, or when the
// etcd leader crashes (the followers forward it to the dead leader until
// they elect another), gets no answer. An owned KV makes every commit
// apply at most once, so that it can send it again: the commits of an
// Owner are serialized, each also writes LastOwnerKey (its value
// unchanged), and each applies only if LastOwnerKey's mod revision is the
// one the last commit known to apply left (the guard):
//
//	If(LeaseValue(owner) == lease, ModRevision(owner.last) == guard)
//	Then(Txn(If(the reads' comparisons) Then(the writes, Put(owner.last))))
//	Else(Get(owner), Get(owner.last))
//
// A commit whose attempt failed without an answer (a deadline, an
// unavailable member, a stopped server, a leader lost mid-request) is sent
// again, for up to one more RequestTimeout, until etcd answers: applied
// now, or refused with the owner key still carrying the lease and the
// guard moved, which says the first attempt was applied (at the guard's
// revision), or a conflict, which says neither was. The first attempt
// cannot apply later: the guard has moved, or moves with the second. So a
// leader change costs a commit its election time, not the file system;
// only a commit that finds no quorum for 2 x RequestTimeout fails with
// "outcome unknown". A guard that moved with nothing unanswered (another
// writer of the prefix) fails the commit with ErrConflict.
//
// # Ownership
//
// One host at a time may change a volume: the one whose etcd lease the
// owner key carries. Acquire grants a lease of OwnerOptions.TTL and
// creates the owner key, holding the Holder (host, pid, mount point, start
// time) as JSON, attached to the lease, in one transaction that writes
// only if the key is absent:
//
//	If(CreateRevision(owner) == 0)
//	Then(Put(owner, holder, lease), Get(owner.last), Put(owner.last, holder))
//	Else(Get(owner))                 the holder, for the refusal or the wait
//
// A second host's Acquire fails with a *HeldError naming the holder or, as
// a standby, watches the owner key until it is deleted and tries again.
// From then on every commit of the KV is nested in the owner's comparison:
//
//	If(LeaseValue(owner) == lease)
//	Then(Txn(If(the reads' comparisons) Then(the writes)))
//	Else(Get(owner))
//
// so a commit sent after the lease expired or was revoked, or after the
// key was deleted by hand, writes nothing and fails with ErrNotOwner (and
// EIO), whatever the host believes: etcd decides, linearizably. The
// owner's comparison costs one operation of --max-txn-ops.
//
// A goroutine keeps the lease alive: every TTL/4 it sends a keep-alive
// and, if etcd renewed the lease, reads the owner key to check that it
// still carries the lease (an operator may delete the key of a live lease
// to force a takeover). Only then does it move the Owner's deadline to
//
//	deadline = (send time of that keep-alive) + TTL - Margin
//
// on this host's monotonic clock: the send time, not the reply's, because
// etcd renewed the lease after the keep-alive was sent, so the lease
// cannot expire on etcd before send time + TTL (up to the clocks' rates,
// which Margin covers). Owner.Notify hands each new deadline, and the
// loss, to the data fence (device/fencedev), which admits data requests
// only before the deadline. The lease is lost when etcd says so: a
// keep-alive answered "lease not found", an owner key without the lease, a
// commit refused by the owner's comparison. An etcd that does not answer
// proves nothing either way: the deadline passes, the fence holds and then
// fails data requests, commits fail after RequestTimeout, but the Owner is
// not lost until etcd answers.
//
// A host taking over after a lease expired or was revoked cannot know
// when the previous owner's deadline ended, only that it ended before the
// takeover + that owner's TTL (its last renewal was sent before its key
// was deleted), and that its requests then in flight end within its
// request bound. So it waits that long (Owner.TakeoverWait: the longest of
// its own TTL + Margin + bound and the previous owner's, which
// LastOwnerKey records) after Acquire before its first data request
// (package volume does). Owner.Release, called by a host after its last
// data request, deletes the owner key and marks LastOwnerKey released in
// one transaction; the next owner then knows (Owner.Clean) that the
// previous one ended cleanly, and need not wait. mkfs writes a released
// LastOwnerKey (MarkReleased).
//
// # Concurrency
//
// A KV, its Snapshots and its Owner are safe for concurrent use; a Txn is
// used by one goroutine, as meta.Txn says. Stats counts the KV's round
// trips to etcd (with their latencies), commits, conflicts, retries and
// commits refused for want of ownership, with atomic counters.
package etcdkv
