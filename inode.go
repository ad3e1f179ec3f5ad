package sluice

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/lockrank"
	"github.com/sluicefs/sluice/iolock"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/pagecache"
)

// inode is the in-core inode. Every in-core inode is in fs.icache.m.
//
// Its in-core state is authoritative; the metadata lags behind it in two
// ways only: attributes changed by data writes (size, times) are persisted
// at the next sync point, and extents converted to written are persisted as
// written only once their data is known durable (extmap epochs). Both are
// tracked through fs.dirty.
type inode struct {
	fs  *FS
	ino meta.Ino // Immutable.

	// io is the I/O lock (the kernel's i_rwsem / XFS IOLOCK): it admits
	// data operations; see the iolock package for which takes which mode.
	io iolock.Lock
	// dio counts direct I/Os in flight (inode_dio_begin/end/wait).
	dio iolock.DIO
	// ranges is the block-range lock: sub-block direct writes that must
	// allocate, convert or zero, and appends, lock the file blocks they
	// touch under the shared I/O lock (iolock.RangeLock).
	ranges iolock.RangeLock
	// appends is the queue of parallel appends in flight (appends.go).
	appends appendQueue
	// convs gathers the conversions of direct writes that complete
	// together into one transaction (convert.go).
	convs convGroup

	// pages is the file's page cache. Immutable (the cache itself is
	// concurrency-safe).
	pages *pagecache.Mapping

	// mu is the short-held inode lock (XFS ILOCK): it guards the fields
	// below and is never held across data-device I/O (metadata commits,
	// and the metadata sync of an allocation that finds only busy
	// blocks, run under it).
	mu lockrank.Mutex[lockrank.InodeMu]
	// attr holds the attributes; attr.Size is the published size.
	// Protected by mu.
	attr meta.Inode
	// ext is the extent map of a regular file, loaded on first use.
	// Protected by mu.
	ext *extmap.Map
	// attrDirty says attr differs from the persisted record.
	// Protected by mu.
	attrDirty bool
	// metaSeq is the sequence number of the last transaction that wrote
	// the inode's record or extents (txn.putAttr, txn.extents), or of the
	// last committed one when the inode was loaded; committedSize is the
	// size that record holds. Once fs.syncedSeq reaches metaSeq, and the
	// size is committedSize and nothing is pending, the metadata needed
	// to read the file's data is durable: fdatasync needs only a device
	// flush (syncData). Protected by mu.
	metaSeq, committedSize uint64
	// recs holds extent-record changes made in core and not yet written
	// to the metadata, in order: the splits and merges of records that a
	// conversion or a copy-on-write remap makes, which change no record's
	// content (the records still say unwritten, or still name the shared
	// blocks, until a sync point). The next transaction that records this
	// inode's extents writes them first (txn.extents), and the sync point
	// at the latest (persist); an inode with some is dirty and is not
	// evicted. Protected by mu.
	recs []recOp
	// displaced holds the staging blocks that a remap displaced (a block
	// copied on write twice before a sync point: the first copy's blocks,
	// which no record names). They stay staged, so a crash frees them at
	// the next open, and the next persist frees them in its transaction
	// (convertWrittenLocked, every maxDeferredRecs, at the latest): freeing
	// each at once cost a transaction per write. An inode with some is
	// dirty and is not evicted. Protected by mu.
	displaced []extmap.DevRange
	// mayShare says some extent of the file may map shared blocks
	// (reflink): set when the file takes part in a clone, or when its
	// extents are loaded while the volume shares blocks; never cleared.
	// Write paths ask the shared-block table only when it is set (cow.go).
	// Protected by mu.
	mayShare bool
	// eofTailClean says the bytes past EOF in the EOF block are known to
	// be zeros on the device (checkEOFTail): set for a file created in
	// this mount, false for one loaded.
	eofTailClean atomic.Bool
	// privChecked says privileged is known: whether a write must strip
	// set-user-ID, set-group-ID or capabilities (the kernel's !IS_NOSEC).
	// Protected by mu.
	privChecked, privileged bool

	// ra is the sequential-read state for readahead.
	ra readaheadState

	// readErrs holds the error of the last failed read of a page (by
	// index), for the next reader of that page: a failed page is removed
	// from the cache, and whoever was waiting for it gets the error
	// instead of starting the same failing read again. Protected by mu.
	readErrs map[uint64]error
	// delalloc holds the file blocks that buffered writes dirtied over a
	// hole and reserved space for; writeback allocates them from the
	// reservation, so it never fails with ENOSPC. Protected by mu.
	delalloc map[uint64]struct{}
	// wbBusy holds the file blocks under writeback, each with a channel
	// closed when it ends (see beginBlockWriteback). Protected by mu.
	wbBusy map[uint64]chan struct{}
	// specEnd is the end (a file block) of the blocks that appends
	// allocated ahead of EOF for the appends to come (appends.go,
	// speculative preallocation); the last close gives back those still
	// unwritten past EOF. explicitPrealloc says a fallocate placed blocks
	// past EOF itself: appends then allocate nothing ahead, and nothing is
	// given back. Protected by mu.
	specEnd          uint64
	explicitPrealloc bool
	// appendConv holds blocks past EOF that writeback wrote for a buffered
	// append not yet published: they stay unwritten until the append's
	// publication converts them, so that no written block ever lies past
	// the size (appends.go). Protected by mu.
	appendConv []fileRange

	// Protected by fs.icache.mu.
	refs     int  // holders: open files and operations in progress
	opens    int  // open File handles
	gone     bool // freed: the inode no longer exists
	retained bool // a directory kept in the cache unreferenced (maybeEvict)
}

// getInode returns the in-core inode ino with a reference taken, loading it
// from the metadata if needed. The caller must putInode it.
func (fs *FS) getInode(ino meta.Ino) (*inode, error) {
	fs.icache.mu.Lock()
	if in, ok := fs.icache.m[ino]; ok {
		in.refs++
		fs.icache.mu.Unlock()
		return in, nil
	}
	fs.icache.mu.Unlock()
	rec, err := fs.loadInodeRecord(ino)
	if err != nil {
		return nil, err
	}
	return fs.addInode(rec, nil), nil
}

// loadInodeRecord reads inode ino's record from the metadata.
func (fs *FS) loadInodeRecord(ino meta.Ino) (*meta.Inode, error) {
	fs.counters.InodeLoads.Add(1)
	v, err := fs.kv.Get(meta.InodeKey(ino))
	if errors.Is(err, meta.ErrNotFound) {
		return nil, syscall.ENOENT
	}
	if err != nil {
		return nil, eio(err)
	}
	rec, err := meta.DecodeInode(v)
	if err != nil {
		return nil, eio(err)
	}
	if rec.Ino != ino {
		return nil, eio(fmt.Errorf("inode record %d names inode %d: %w", ino, rec.Ino, meta.ErrCorrupt))
	}
	return rec, nil
}

// addInode puts the inode of the committed record rec in the cache and
// returns it with a reference taken (or the one a racing loader put there
// first). ext, if not nil, is its extent map (a new file's, empty: nothing
// to load).
func (fs *FS) addInode(rec *meta.Inode, ext *extmap.Map) *inode {
	fresh := &inode{fs: fs, ino: rec.Ino, attr: *rec, ext: ext, metaSeq: fs.committedSeq.Load(), committedSize: rec.Size}
	fresh.eofTailClean.Store(ext != nil) // a file created now: nothing past its EOF
	fs.icache.mu.Lock()
	defer fs.icache.mu.Unlock()
	if in, ok := fs.icache.m[rec.Ino]; ok { // lost a race with another loader
		in.refs++
		return in
	}
	fresh.pages = fs.cache.NewMapping(fresh)
	fresh.refs = 1
	fs.icache.m[rec.Ino] = fresh
	return fresh
}

// putInode drops a reference. An unreferenced inode that is clean leaves
// the cache (a directory may stay: maybeEvict); one with nlink 0 is freed.
func (fs *FS) putInode(in *inode) {
	fs.icache.mu.Lock()
	in.refs--
	if in.refs > 0 {
		fs.icache.mu.Unlock()
		return
	}
	fs.icache.mu.Unlock()
	in.mu.Lock()
	nlink := in.attr.Nlink
	in.mu.Unlock()
	if nlink == 0 {
		fs.freeInode(in)
		return
	}
	fs.maybeEvict(in)
}

// maybeEvict removes in from the cache if nobody holds it and it has
// nothing unpersisted (no dirty pages, attributes or pending conversions).
//
// It takes in.mu before fs.icache.mu, as the sync point's persist does: the
// reverse order deadlocked a last reference drop against a sync point
// (TestEvictRacesSyncPoint). Holding both, the inode can neither gain a
// reference (getInode needs icache.mu) nor become dirty (that needs in.mu
// or a reference).
func (fs *FS) maybeEvict(in *inode) {
	if fs.hooks.evictStart != nil {
		fs.hooks.evictStart(in)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	fs.icache.mu.Lock()
	defer fs.icache.mu.Unlock()
	if in.refs > 0 || in.gone || fs.icache.m[in.ino] != in {
		return
	}
	// Delayed-allocation reservations live only in the in-core inode:
	// evicting one that holds any would lose them for the mount's life.
	if in.attrDirty || in.ext != nil && in.ext.Pending() || len(in.recs) > 0 || len(in.displaced) > 0 || len(in.delalloc) > 0 || !in.pages.Evictable() {
		return
	}
	if isDir(in.attr.Mode) {
		// Directories stay, up to maxRetainedDirs: every lookup and
		// create in one needs it, and reading its record back each time
		// cost a metadata read per call (XFS keeps inodes cached while
		// dentries refer to them). The engine is the only writer of its
		// metadata, so what stays in core stays true.
		if in.retained {
			return
		}
		if fs.icache.retainedDirs < maxRetainedDirs {
			in.retained = true
			fs.icache.retainedDirs++
			return
		}
	}
	in.pages.Drop()
	delete(fs.icache.m, in.ino)
}

// maxRetainedDirs bounds the directories kept in the inode cache while
// unreferenced.
const maxRetainedDirs = 1 << 14

// recOp is one deferred extent-record change: a Put of ext at file block
// fb, or a Delete of the record at fb.
type recOp struct {
	fb  uint64
	ext meta.Extent
	del bool
}

// deferRecords is the Recorder of a change whose records need not be
// written now (see inode.recs): it appends to in.recs.
//
// Preconditions: in.mu is held while it records.
type deferRecords struct{ in *inode }

func (r deferRecords) Put(e extmap.Extent) {
	r.in.recs = append(r.in.recs, recOp{fb: e.FileBlock, ext: e.Persisted()})
}
func (r deferRecords) Delete(fb uint64) { r.in.recs = append(r.in.recs, recOp{fb: fb, del: true}) }

// clearRecs forgets the deferred record changes a committed transaction
// wrote.
//
// Preconditions: in.mu is held.
func (in *inode) clearRecs() {
	if cap(in.recs) > 1024 {
		in.recs = nil
	} else {
		in.recs = in.recs[:0]
	}
}

// extentsLocked returns the extent map, loading it on first use.
//
// Preconditions: in.mu is held.
func (in *inode) extentsLocked() (*extmap.Map, error) {
	if in.ext != nil {
		return in.ext, nil
	}
	var recs []meta.Extent
	start, end := meta.ExtentPrefix(in.ino)
	err := in.fs.kv.Scan(start, end, func(k, v []byte) error {
		_, e, err := meta.DecodeExtent(k, v)
		if err != nil {
			return err
		}
		recs = append(recs, e)
		return nil
	})
	if err != nil {
		return nil, eio(err)
	}
	m, err := extmap.Load(recs)
	if err != nil {
		return nil, eio(fmt.Errorf("inode %d: %w", in.ino, err))
	}
	in.ext = m
	in.noteSharingLocked(m)
	return m, nil
}

// persist writes in's attributes if they are dirty and marks its
// conversions and copy-on-write remaps stamped <= epoch durable, in one
// transaction: a remap's record now maps the new blocks, so they leave the
// staging set and the old ones lose the reference the record held. Called
// by the sync point after the device flush.
func (in *inode) persist(epoch uint64) error {
	fs := in.fs
	in.mu.Lock()
	defer in.mu.Unlock()
	if fs.hooks.persistLocked != nil {
		fs.hooks.persistLocked(in)
	}
	fs.icache.mu.Lock()
	gone := in.gone
	fs.icache.mu.Unlock()
	if gone {
		fs.dirty.mu.Lock()
		delete(fs.dirty.set, in)
		fs.dirty.mu.Unlock()
		if len(in.displaced) == 0 {
			return nil
		}
		return fs.transact(func(t *txn) error { return in.freeDisplaced(t) })
	}
	err := fs.transact(func(t *txn) error {
		if len(in.recs) > 0 {
			t.extents(in) // the deferred record changes go first
		}
		if err := in.freeDisplaced(t); err != nil {
			return err
		}
		if in.ext != nil && in.ext.Pending() {
			for _, r := range in.ext.MarkDurable(epoch, t.extents(in)) {
				if err := t.remapped(r); err != nil {
					return err
				}
			}
		}
		if in.attrDirty {
			t.putAttr(in)
			in.attrDirty = false
		}
		return nil
	})
	if err != nil {
		return err
	}
	if (in.ext == nil || !in.ext.Pending()) && len(in.recs) == 0 && len(in.displaced) == 0 {
		fs.dirty.mu.Lock()
		delete(fs.dirty.set, in)
		fs.dirty.mu.Unlock()
	}
	return nil
}

// freeDisplaced frees, in t, the staging blocks remaps displaced.
//
// Preconditions: in.mu is held.
func (in *inode) freeDisplaced(t *txn) error {
	if len(in.displaced) == 0 {
		return nil
	}
	d := in.displaced
	in.displaced = nil
	return t.freeBlocks(d)
}

// now returns the current time in the metadata's unit.
func now() int64 { return time.Now().UnixNano() }

// isDir and friends test the file type of a mode.
func isDir(mode uint32) bool     { return mode&syscall.S_IFMT == syscall.S_IFDIR }
func isReg(mode uint32) bool     { return mode&syscall.S_IFMT == syscall.S_IFREG }
func isSymlink(mode uint32) bool { return mode&syscall.S_IFMT == syscall.S_IFLNK }

// size returns the published size.
func (in *inode) size() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return int64(in.attr.Size)
}
