package sluice

import (
	"slices"
	"sync/atomic"
	"syscall"

	"github.com/sluicefs/sluice/internal/lockrank"
	"github.com/sluicefs/sluice/iolock"
	"github.com/sluicefs/sluice/meta"
)

// Parallel appends (Policy.ParallelAppends): no kernel file system does
// this. XFS buffered appends, ext4 and FUSE take the exclusive lock for
// every append, because the position is the size, which the append itself
// moves; XFS's direct appends take it shared and leave racing appenders to
// pick the same offset. Here an append, direct or buffered, takes the I/O
// lock shared and reserves its range [off, off+len) in a short critical
// section (reserveAppend): off is the end of the last reservation still in
// flight, or the size if none is. Appends then write at the same time, and
// each one's completion publishes the size in reservation order
// (appendEnded): the size moves over the completed appends at the head of
// the queue, never past one still in flight, so a reader never sees a hole
// or zeros inside the size, and the file is always the completed appends in
// reservation order. An append's call returns (or its asynchronous
// completion runs) only once its range is published, as an append's data
// is visible once write(2) returns.
//
// Blocks: each append queues its blocks in the inode's block-range lock
// (in.ranges) in reservation order, and holds them until its range is
// published. So two appends that share a block (sub-block records) are
// ordered, and the second finds the first's data converted and its block
// written; appends into different blocks never wait for each other.
// Published conversions and the size change together, in core, and reach
// the metadata together at the next sync point (convertWrittenLocked; the
// conversion of a direct append's unwritten blocks waits for the
// publication: a block past the size is never written), and a buffered
// append's pages that writeback wrote before its publication keep their
// blocks unwritten until then (in.appendConv).
//
// Failures: an append that fails (an allocation's ENOSPC, a device EIO),
// or a buffered append cut short, is resolved by this rule: if no later
// append that succeeds follows it, its reservation is given back and the
// size never covers it (AppendsReleased); otherwise the later appends keep
// their ranges and the failed bytes are published with them, reading as
// zeros (AppendsZeroed) — except that where a failed direct write went in
// place into the block that held EOF, those bytes hold what the failed
// device write left, as after any failed write. A failed append returns
// its error (a short buffered append its count) either way.
//
// What stays exclusive: an append that must strip set-user-ID bits or
// capabilities (after the appends in flight have drained), and a NOWAIT
// buffered append (the ring's inline attempt), which could stop short and
// leave zeros behind later appends. Every exclusive operation that changes
// the size or layout (truncate, fallocate, a write past EOF) drains direct
// I/O first and so waits for every append in flight: direct appends count
// as in flight until they are published, buffered ones hold the shared
// lock until then.

// appendQueue is an inode's parallel appends in flight, in reservation
// order.
type appendQueue struct {
	mu lockrank.Mutex[lockrank.Appends]
	// q holds the reservations not yet published or given back, oldest
	// first. Protected by mu.
	q []*appendRes
	// end is the end of the last reservation in q. Protected by mu.
	end int64
	// pending is len(q), for readers that cannot take mu (writeback,
	// under inode.mu). Written under mu.
	pending atomic.Int32
	// publishing is set while a goroutine publishes the head of q, with
	// mu released during its commit. Protected by mu.
	publishing bool
}

// appendRes is one append's reservation.
type appendRes struct {
	in *inode
	// off and end are the reserved bytes [off, end); a failed or short
	// append with nothing after it lowers end. Protected by
	// appendQueue.mu.
	off, end int64
	// rng is the append's blocks in in.ranges: held until its range is
	// published, or given up once it has failed.
	rng *iolock.Range
	// done says the append's writes have ended, with err; failed that it
	// wrote nothing, so its range reads as zeros if it is published.
	// Protected by appendQueue.mu.
	done, failed bool
	err          error
	// perr is the publication's error. Written under appendQueue.mu
	// before finish.
	perr error
	// conv are the unwritten block ranges a direct append wrote, converted
	// at its publication. Immutable once done.
	conv []fileRange
	// op is a direct append's request, finished at publication;
	// published is closed at a buffered append's publication.
	op        *dioOp
	published chan struct{}
}

// reserveAppend reserves k's bytes at the end of the file, sets k.off and
// queues the blocks they touch in in.ranges behind every earlier request
// (a blocking caller then waits for them with in.ranges.Wait). With
// k.nowait it reserves only what can run without blocking: blocks that are
// free in in.ranges now (taken at once), already mapped (no allocation) and
// not cached (nothing to write back); otherwise EAGAIN, with nothing done.
// An O_DIRECT append must start on an I/O unit.
//
// Preconditions: in.io is held shared; k.buf is not empty.
func (in *inode) reserveAppend(k *kiocb) (*appendRes, error) {
	fs := in.fs
	q := &in.appends
	q.mu.Lock()
	defer q.mu.Unlock()
	in.mu.Lock()
	off := int64(in.attr.Size)
	in.mu.Unlock()
	if len(q.q) > 0 {
		off = max(off, q.end)
	}
	k.off = off
	if err := clampToMaxSize(k); err != nil {
		return nil, err
	}
	if k.direct && off%fs.ioUnit != 0 {
		return nil, errnof(syscall.EINVAL, "O_DIRECT append at unaligned end of file %d", off)
	}
	end := off + int64(len(k.buf))
	first, nb := fs.blockRange(off, end)
	r := &appendRes{in: in, off: off, end: end}
	if k.nowait {
		if k.direct && in.cachedInRange(in.wholeBlocks(off, end)) {
			return nil, fs.nowaitEAGAIN(nwCachedPages)
		}
		mapped, err := in.mapped(first, nb)
		if err != nil {
			return nil, err
		}
		if !mapped {
			return nil, fs.nowaitEAGAIN(nwAllocate)
		}
		if r.rng = in.ranges.TryLock(first, nb); r.rng == nil {
			return nil, fs.nowaitEAGAIN(nwRangeBusy)
		}
	} else {
		r.rng = in.ranges.Enqueue(first, nb)
	}
	q.q = append(q.q, r)
	q.end = end
	q.pending.Store(int32(len(q.q)))
	fs.counters.LockSharedAppend.Add(1)
	return r, nil
}

// reservedBlocks returns the file block after the last append reserved
// now: a direct append that must allocate allocates up to it, for the
// appends in flight after it too (planWrite), so that they do not each
// commit an allocation of their own. A later append that fails leaves its
// blocks allocated, unwritten, past EOF, where fallocate's KEEP_SIZE
// leaves them too; truncate frees them.
func (q *appendQueue) reservedBlocks(blockSize int64) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.q) == 0 {
		return 0
	}
	return uint64(roundUp(q.end, blockSize) / blockSize)
}

// Speculative preallocation bounds, in bytes (XFS's is dynamic too, up to
// 8 GiB; appends here need only enough to keep allocation commits rare).
const (
	specPreallocMin = 64 << 10
	specPreallocMax = 1 << 20
)

// appendAllocTo returns the file block up to which a direct append r that
// must allocate allocates (planWrite): every append reserved after it, and
// then ahead of them as much as the file's size, between 64 KiB and 1 MiB
// (XFS's speculative preallocation past EOF), so that appenders commit an
// allocation once in a while instead of once each. It records the
// preallocation in in.specEnd for the last close to give back what no
// append wrote; a file with blocks past EOF that are not its own
// preallocation (a fallocate) gets none.
func (in *inode) appendAllocTo(r *appendRes) uint64 {
	fs := in.fs
	to := in.appends.reservedBlocks(fs.blockSize)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.explicitPrealloc {
		return to
	}
	if in.specEnd == 0 {
		// Blocks already past what the appends reserved, and not ours
		// (a fallocate before this inode was loaded, a crash's leftover
		// preallocation): the last close must not give them back, so
		// allocate nothing ahead.
		m, err := in.extentsLocked()
		if err != nil {
			return to // planWrite meets the error too
		}
		if last, ok := m.LastBlock(); ok && last > max(to, uint64(roundUp(r.end, fs.blockSize)/fs.blockSize)) {
			in.explicitPrealloc = true
			return to
		}
	}
	ahead := min(max(int64(in.attr.Size), specPreallocMin), specPreallocMax)
	to = max(to, uint64(roundUp(r.end+ahead, fs.blockSize)/fs.blockSize))
	in.specEnd = max(in.specEnd, to)
	return to
}

// trimSpeculative gives back the blocks past EOF that appends allocated
// ahead and nothing wrote (xfs_free_eofblocks at the last close): the
// unwritten extents between the EOF block and in.specEnd.
func (in *inode) trimSpeculative() error {
	fs := in.fs
	in.mu.Lock()
	spec := in.specEnd
	in.mu.Unlock()
	if spec == 0 || fs.writable() != nil {
		return nil // read-only or shut down: they stay, unwritten
	}
	in.lockSpace()
	defer in.io.Unlock(iolock.Exclusive)
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil || in.specEnd == 0 || in.explicitPrealloc {
		return err
	}
	fb := uint64(roundUp(int64(in.attr.Size), fs.blockSize) / fs.blockSize)
	spec, in.specEnd = in.specEnd, 0
	if spec <= fb {
		return nil
	}
	return fs.transact(func(t *txn) error {
		for _, sg := range m.Lookup(fb, spec-fb, nil) {
			if sg.Hole || sg.State == meta.Written {
				continue
			}
			if err := t.freeBlocks(m.Remove(sg.FileBlock, sg.Len, t.extents(in))); err != nil {
				return err
			}
		}
		return nil
	})
}

// mapped reports whether the file blocks [first, first+n) are all
// allocated (written or unwritten).
func (in *inode) mapped(first, n uint64) (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil {
		return false, err
	}
	for _, s := range m.Lookup(first, n, nil) {
		if s.Hole {
			return false, nil
		}
	}
	return true, nil
}

// appendWrite is the entry of a parallel append (Policy.ParallelAppends):
// the direct or buffered route, or the exclusive one where it must be.
//
// Preconditions: k.append; k.buf is not empty.
func (in *inode) appendWrite(k *kiocb) (int, error) {
	if k.direct {
		return in.directAppend(k)
	}
	if k.nowait {
		// It could stop short, at a page it cannot take, with later
		// appends already placed after it: the exclusive route, which
		// NOWAIT callers leave whole to a worker when it would block.
		return in.bufferedWrite(k)
	}
	return in.bufferedAppend(k)
}

// directAppend is a parallel O_DIRECT append: reserve, wait for the
// blocks, write them as an aligned or sub-block direct write does
// (allocating holes as unwritten, zeroing around the bytes in unwritten
// blocks), and leave the conversion and the size to the publication,
// which also finishes the request (finishAppended).
func (in *inode) directAppend(k *kiocb) (int, error) {
	fs := in.fs
	if err := fs.checkDirect(k.buf, 0); err != nil {
		return 0, err
	}
	fs.counters.DirectWrites.Add(1)
	if err := in.lockIO(iolock.Shared, k.nowait); err != nil {
		return 0, err
	}
	if !k.keepPrivs && in.needsPrivStrip() || in.sharing() {
		in.io.Unlock(iolock.Shared)
		if k.nowait {
			return 0, fs.nowaitEAGAIN(nwNeedExclusive)
		}
		return in.directWriteExclusiveAppend(k)
	}
	r, err := in.reserveAppend(k)
	if err != nil {
		in.io.Unlock(iolock.Shared)
		return 0, err
	}
	if !k.nowait {
		in.ranges.Wait(r.rng)
	}
	in.touchMtime()
	fail := func(err error) (int, error) {
		in.io.Unlock(iolock.Shared)
		in.appendEnded(r, 0, err)
		return 0, err
	}
	if err := in.invalidateRange(in.wholeBlocks(r.off, r.end)); err != nil {
		return fail(err)
	}
	op := newDioOp(in, k)
	conv, err := in.planWrite(op, k.buf, k.off, k.nowait, in.appendAllocTo(r))
	if err != nil {
		op.free()
		return fail(err)
	}
	op.write, op.off, op.end, op.conv, op.mode = true, r.off, r.end, conv, iolock.Shared
	op.app, r.op, r.conv = r, op, conv
	async := k.done != nil
	in.dioBegin()
	in.ranges.Handoff(r.rng) // the publication unlocks it
	op.b.submit()
	in.io.Unlock(iolock.Shared)
	if async {
		return 0, errQueued // op belongs to the completion now
	}
	return op.wait()
}

// written is the completion of a direct append's device writes (called by
// finishWrite): the append is done, and the publication finishes it.
func (r *appendRes) written(op *dioOp, err error) {
	n := int64(0)
	if err == nil {
		n = op.end - op.off
	}
	r.in.appendEnded(r, n, err)
}

// directWriteExclusiveAppend is a direct append that must take the lock
// exclusive (privileges to strip): once the appends in flight have
// drained, the classic route.
func (in *inode) directWriteExclusiveAppend(k *kiocb) (int, error) {
	if int64(len(k.buf))&(in.fs.blockSize-1) != 0 {
		return in.directWriteUnaligned(k)
	}
	return in.directWriteAligned(k)
}

// bufferedAppend is a parallel buffered append: reserve, wait for the
// blocks, copy into the page cache as a buffered write does (judging each
// page against the reservation's start, which every byte before it will
// have reached by the time the blocks are granted: appends into a common
// block are published in order before the next is granted), then wait for
// the publication.
func (in *inode) bufferedAppend(k *kiocb) (int, error) {
	fs := in.fs
	fs.cache.ThrottleDirty()
	in.io.Lock(iolock.Shared)
	if !k.keepPrivs && in.needsPrivStrip() || in.sharing() {
		in.io.Unlock(iolock.Shared)
		return in.bufferedWrite(k) // drains the appends in flight first
	}
	r, err := in.reserveAppend(k)
	if err != nil {
		in.io.Unlock(iolock.Shared)
		return 0, err
	}
	fs.counters.BufferedWrites.Add(1)
	in.ranges.Wait(r.rng)
	in.touchMtime()
	done, err := in.copyToPages(k, false)
	r.published = make(chan struct{})
	in.ranges.Handoff(r.rng) // the publication unlocks it
	in.appendEnded(r, done, err)
	lockrank.Wait(lockrank.RankAppends, 0, nil)
	<-r.published
	in.io.Unlock(iolock.Shared)
	if done == 0 {
		return 0, err
	}
	if r.perr != nil {
		return 0, r.perr
	}
	return in.bufferedWriteDone(k, done)
}

// appendEnded records that append r has written its first n bytes (all of
// them unless err), applies the failure rule to what it did not write, and
// publishes every append at the head of the queue that can be published.
// One goroutine publishes at a time (appendQueue.publishing), the queue's
// lock released while it publishes: an append that ends meanwhile is only
// marked done, and the publisher takes it with the next batch, so appends
// that end together are published together. The appends published, and those
// given back, are then finished outside the queue's lock.
func (in *inode) appendEnded(r *appendRes, n int64, err error) {
	fs := in.fs
	q := &in.appends
	q.mu.Lock()
	r.done, r.err = true, err
	if r.off+n < r.end {
		if n == 0 {
			r.failed = true
			// Nothing of it to order a later append behind.
			in.ranges.Unlock(r.rng)
			r.rng = nil
		} else {
			// Cut short: what it wrote is published in its turn, and
			// the rest is a failed reservation of its own.
			i := slices.Index(q.q, r)
			rest := &appendRes{in: in, off: r.off + n, end: r.end, done: true, failed: true}
			r.end = rest.off
			q.q = slices.Insert(q.q, i+1, rest)
		}
	}
	released := q.trimTail()
	var published []*appendRes
	if !q.publishing {
		q.publishing = true
		for {
			run := q.publishable()
			if len(run) == 0 {
				break
			}
			q.mu.Unlock()
			perr := in.publishAppends(run)
			q.mu.Lock()
			q.q = slices.Delete(q.q, 0, len(run))
			for _, p := range run {
				p.perr = perr
			}
			published = append(published, run...)
			released = append(released, q.trimTail()...)
		}
		q.publishing = false
	}
	q.pending.Store(int32(len(q.q)))
	if len(q.q) == 0 && len(released)+len(published) > 0 {
		// Nothing in flight: what writeback deferred belongs to nothing.
		in.mu.Lock()
		in.appendConv = nil
		in.mu.Unlock()
	}
	q.mu.Unlock()
	if !slices.Contains(published, r) && !slices.Contains(released, r) {
		fs.counters.AppendPublishWaits.Add(1)
	}
	for _, p := range released {
		fs.counters.AppendsReleased.Add(1)
		p.finish(p == r)
	}
	for _, p := range published {
		if p.failed {
			fs.counters.AppendsZeroed.Add(1)
		}
		p.finish(p == r)
	}
}

// trimTail gives back the reservations at the tail of the queue that are
// done and failed (nothing after them will be published), lowering end,
// and returns them. It never reaches a batch being published, which ends
// with an append that succeeded.
//
// Preconditions: q.mu is held.
func (q *appendQueue) trimTail() []*appendRes {
	var out []*appendRes
	for len(q.q) > 0 {
		p := q.q[len(q.q)-1]
		if !p.done || !p.failed {
			break
		}
		q.q = q.q[:len(q.q)-1]
		out = append(out, p)
	}
	if len(q.q) > 0 {
		q.end = q.q[len(q.q)-1].end
	}
	return out
}

// publishable returns the done appends at the head of the queue up to the
// last of them that succeeded (failed ones after it wait until a later one
// succeeds, or trimTail gives them back), leaving them in the queue, so
// that the queue's end stays valid while they are published.
//
// Preconditions: q.mu is held.
func (q *appendQueue) publishable() []*appendRes {
	last := -1
	for i, p := range q.q {
		if !p.done {
			break
		}
		if !p.failed {
			last = i
		}
	}
	return slices.Clone(q.q[:last+1])
}

// publishAppends publishes the appends of run, the head of the queue: it
// converts the unwritten blocks they wrote (and those writeback wrote for
// them, in.appendConv) and raises the size to the end of the last, in one
// transaction when there is anything to convert, in core otherwise
// (persisted at the next sync point, as a buffered write's size is).
//
// Preconditions: the caller set in.appends.publishing and holds no lock.
func (in *inode) publishAppends(run []*appendRes) error {
	fs := in.fs
	var conv []fileRange
	end := run[len(run)-1].end
	for _, p := range run {
		if !p.failed {
			conv = append(conv, p.conv...)
		}
	}
	in.mu.Lock()
	// Writeback's deferred conversions that the new size covers.
	fb := uint64(roundUp(end, fs.blockSize) / fs.blockSize)
	keep := in.appendConv[:0]
	for _, c := range in.appendConv {
		if c.first < fb {
			conv = append(conv, fileRange{c.first, min(c.n, fb-c.first)})
		}
		if c.first+c.n > fb {
			lo := max(c.first, fb)
			keep = append(keep, fileRange{lo, c.first + c.n - lo})
		}
	}
	in.appendConv = keep
	var err error
	dirty := false
	switch {
	case len(conv) > 0:
		dirty, err = in.convertWrittenLocked(conv, nil, end, true)
	case uint64(end) > in.attr.Size:
		in.attr.Size = uint64(end)
		dirty = !in.attrDirty
		in.attrDirty = true
	}
	in.mu.Unlock()
	if dirty {
		fs.markDirty(in)
	}
	return err
}

// finish ends append p once it is published (or given back), with
// p.perr, the publication's error, if p's own is nil. A direct append's request
// finishes (finishAppended: on this goroutine if self, the caller's own
// completion, else on its own, since it may sync): it drops the cached
// pages of its range, which a reader may have filled with zeros past the
// size it saw, then unlocks its blocks, so that no later append can dirty
// such a page before it is dropped. A buffered append's blocks are
// unlocked and its waiter woken.
func (p *appendRes) finish(self bool) {
	rng := p.rng
	p.rng = nil
	err := p.err
	if err == nil {
		err = p.perr
	}
	switch {
	case p.op != nil && self:
		p.op.finishAppended(rng, err)
	case p.op != nil:
		if !p.op.finishInWaiter(stepFinishAppended, rng, err) {
			go p.op.finishAppended(rng, err)
		}
	default:
		if rng != nil {
			p.in.ranges.Unlock(rng)
		}
		if p.published != nil {
			close(p.published)
		}
	}
}
