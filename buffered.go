package sluice

import (
	"slices"
	"sync"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/lockrank"
	"github.com/sluicefs/sluice/iolock"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/pagecache"
)

// Buffered I/O through the page cache (seeds 003 and 004). See the
// pagecache package for page states and waiters. The read path comes
// first (bufferedRead, readahead, startPageReads), then the write path
// (bufferedWrite, writePage), then the page reads both use
// (readPageLocked, readRangeInto).

// bufferedRead copies from the page cache, reading missing pages in with
// readahead (filemap_read). The lock is taken shared.
//
// A read that finds a page under I/O waits for it; with k.nowait it
// returns EAGAIN; with k.asyncRetry (the ring's async buffered read, seed
// 003) it arms a callback on the page's unlock and returns ErrRetryArmed
// (or the bytes copied so far).
func (in *inode) bufferedRead(k *kiocb) (int, error) {
	fs := in.fs
	if len(k.buf) == 0 {
		return 0, nil
	}
	if err := in.lockIO(iolock.Shared, k.nowait); err != nil {
		return 0, err
	}
	defer in.io.Unlock(iolock.Shared)
	fs.counters.LockSharedBufferedRead.Add(1)
	fs.counters.BufferedReads.Add(1)
	ps := int64(fs.cache.PageSize())
	copied := int64(0)
	for {
		size := in.size()
		pos := k.off + copied
		if pos >= size || copied == int64(len(k.buf)) {
			return int(copied), nil
		}
		end := min(k.off+int64(len(k.buf)), size)
		idx := uint64(pos / ps)
		// One lookup of the page table: a miss creates the page (locked),
		// and readahead reads it in.
		p, created, err := in.pages.GetOrCreate(idx, k.nowait)
		switch {
		case err == pagecache.ErrNoRoom && k.nowait:
			err = fs.nowaitEAGAIN(nwCacheFull)
		case err == pagecache.ErrNoRoom:
			err = eio(err)
		case err == nil && created:
			err = in.readahead(p, uint64((end-1)/ps), size, k.nowait, k.dontcache)
		}
		if err != nil {
			if copied > 0 {
				return int(copied), nil
			}
			return 0, err
		}
		if !p.Uptodate() {
			n, err, again := in.waitPageUptodate(k, p, copied)
			if !again || !p.Uptodate() || p.Removed() && !created {
				in.pages.Release(p)
				if !again {
					return n, err
				}
				continue
			}
			// Uptodate now. A page this read created may no longer be
			// cached (uncacheEOFPage), but it was read after size was
			// sampled, so its bytes are the file's up to size; a page
			// another read created and that is gone may have been read
			// at a smaller size, and is looked up again.
		}
		from := pos - int64(idx)*ps
		n := copy(k.buf[copied:end-k.off], p.Data[from:])
		if p.DropBehind() {
			in.usedDropBehind(p, k.dontcache, !k.nowait)
		}
		in.pages.Release(p)
		copied += int64(n)
	}
}

// waitPageUptodate deals with a page that is not uptodate during a
// buffered read. again says to look the page up again; otherwise n, err
// end the read.
func (in *inode) waitPageUptodate(k *kiocb, p *pagecache.Page, copied int64) (n int, err error, again bool) {
	if p.Locked() {
		switch {
		case k.asyncRetry != nil:
			if copied > 0 {
				// Bytes were copied: complete with the partial count
				// rather than queue (the kernel cannot return
				// -EIOCBQUEUED after a partial copy either).
				return int(copied), nil, false
			}
			if !p.WaitUnlockedAsync(k.asyncRetry) {
				in.fs.counters.AsyncReadCallbacksArmed.Add(1)
				return 0, ErrRetryArmed, false
			}
			return 0, nil, true
		case k.nowait:
			if copied > 0 {
				return int(copied), nil, false
			}
			return 0, in.fs.nowaitEAGAIN(nwPageBusy), false
		}
		p.WaitUnlocked()
	}
	if err := p.Err(); err != nil {
		// The read that this page waited for failed: its waiters get
		// the error instead of retrying for ever.
		in.takeReadErr(p.Index)
		if copied > 0 {
			return int(copied), nil, false
		}
		return 0, err, false
	}
	if p.Removed() {
		return 0, nil, true
	}
	if p.Uptodate() {
		return 0, nil, true
	}
	// Not uptodate and unlocked: a partial page (pending write) whose
	// other bytes must be read in now.
	if k.nowait || k.asyncRetry != nil {
		if copied > 0 {
			return int(copied), nil, false
		}
		return 0, in.fs.nowaitEAGAIN(nwPageRead), false
	}
	p.Lock()
	if !p.Removed() && !p.Uptodate() {
		err = in.readPageLocked(p)
	}
	p.Unlock()
	if err != nil {
		return 0, err, false
	}
	return 0, nil, true
}

// readaheadState tracks sequential reads of one file.
type readaheadState struct {
	mu     lockrank.Mutex[lockrank.Readahead]
	next   uint64 // page index a sequential reader would read next
	window uint64 // current readahead window, in pages
}

const (
	raInitPages = 4
	raMaxPages  = 64
)

// readahead starts reading page first in, which the caller just created
// (locked and referenced: the caller keeps its reference, and waits on
// the page), and creates and starts reading the pages after it up to last
// that are not cached, plus, for a sequential reader, a window after them
// (adaptive, doubling up to raMaxPages). An uncached read (dontcache)
// reads no window and leaves the readahead state alone, and its pages are
// marked to be dropped once the read copied from them. Reads are
// asynchronous: the pages stay locked until their data arrives. A read
// error recorded for page first by an earlier failed read is returned
// (once) instead of reading again: first is then removed, unlocked and
// released.
func (in *inode) readahead(first *pagecache.Page, last uint64, size int64, nowait, dontcache bool) error {
	fs := in.fs
	idx := first.Index
	if err := in.takeReadErr(idx); err != nil {
		in.pages.Remove(first)
		first.Unlock()
		in.pages.Release(first)
		return err
	}
	ps := int64(fs.cache.PageSize())
	eofIdx := uint64((size - 1) / ps)
	end := min(last, eofIdx)
	if !dontcache {
		in.ra.mu.Lock()
		if idx == in.ra.next && idx != 0 || idx == 0 && in.ra.window > 0 {
			in.ra.window = min(max(in.ra.window*2, raInitPages), raMaxPages)
		} else {
			in.ra.window = 0
		}
		end = min(max(last, idx+in.ra.window), eofIdx)
		in.ra.next = end + 1
		in.ra.mu.Unlock()
	}

	if dontcache {
		first.SetDropBehind()
	}
	in.pages.Ref(first) // the read's reference (first is locked, so still cached)
	var inline [8]*pagecache.Page
	pages := append(inline[:0], first)
	for i := idx + 1; i <= end; i++ {
		p, created, err := in.pages.GetOrCreate(i, nowait || i > last)
		if err != nil {
			break
		}
		if !created {
			in.pages.Release(p)
			if i <= last {
				break // the reader will find it
			}
			continue
		}
		if i > last {
			fs.counters.ReadaheadPages.Add(1)
		}
		if dontcache {
			p.SetDropBehind()
		}
		pages = append(pages, p)
	}
	in.startPageReads(pages)
	return nil
}

// takeReadErr returns and forgets the recorded read error of page idx.
func (in *inode) takeReadErr(idx uint64) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	err := in.readErrs[idx]
	if err != nil {
		delete(in.readErrs, idx)
	}
	return err
}

// startPageReads reads locked, referenced pages in from the device
// asynchronously, then marks them uptodate (or carrying the error, removed
// so that the next reader retries), unlocks and releases them
// (finishPageRead). The mapping and the size (past which a page reads as
// zeros) are looked up with the pages already locked, so an extent
// conversion or a size published racing the read (a direct write's
// completion, an append's publication) is followed by an invalidation that
// waits for them: a page never keeps zeros that a size published before
// its read began covers. pages is not kept.
func (in *inode) startPageReads(pages []*pagecache.Page) {
	fs := in.fs
	for _, p := range pages {
		p.Handoff() // the read's completion unlocks it
	}
	ps := int64(fs.cache.PageSize())
	in.mu.Lock()
	m, err := in.extentsLocked()
	size := int64(in.attr.Size)
	appending := in.appends.pending.Load() > 0
	in.mu.Unlock()
	if err != nil {
		for _, p := range pages {
			in.finishPageRead(p, err, size, appending)
		}
		return
	}
	var general []*pagecache.Page
	for _, p := range pages {
		pos := int64(p.Index) * ps
		in.mu.Lock()
		first, nb := fs.blockRange(pos, pos+ps)
		var buf [2]extmap.Segment
		segs := m.Lookup(first, nb, buf[:0])
		in.mu.Unlock()
		s := segs[0]
		if len(segs) != 1 || s.Hole || s.State != meta.Written || fs.ioUnit > ps {
			// Zeros, or a page that needs the general path.
			if len(segs) == 1 && (s.Hole || s.State != meta.Written) {
				clear(p.Data)
				in.finishPageRead(p, nil, size, appending)
				continue
			}
			general = append(general, p)
			continue
		}
		fs.counters.CacheReads.Add(1)
		pr := pageReadPool.Get().(*pageRead)
		if pr.fn == nil {
			pr.fn = pr.done
		}
		pr.in, pr.p, pr.size, pr.appending = in, p, size, appending
		pr.pos, pr.dev = pos, uint64(fs.devOffset(s, pos)/fs.blockSize)
		pr.r = device.Request{Op: device.OpRead, Buf: p.Data, Off: fs.devOffset(s, pos), Done: pr.fn}
		if err := fs.dev.Submit(&pr.r); err != nil {
			pr.free()
			in.finishPageRead(p, eio(err), size, appending)
		}
	}
	if len(general) > 0 {
		in.readGeneral(general, func(p *pagecache.Page, err error) { in.finishPageRead(p, err, size, appending) })
	}
}

// pageRead is the device read of one page that startPageReads submits.
// It is pooled, with its completion bound once, so that a page read
// allocates nothing; the device is done with it once it calls done.
type pageRead struct {
	r         device.Request
	in        *inode
	p         *pagecache.Page
	size      int64                        // as finishPageRead's
	appending bool                         // as finishPageRead's
	fn        func(*device.Request, error) // done, bound once
	// pos is the page's file offset and dev its device block, for the
	// data checksum (a page is whole blocks on a checksummed volume).
	pos int64
	dev uint64
}

var pageReadPool = sync.Pool{New: func() any { return new(pageRead) }}

func (pr *pageRead) done(_ *device.Request, err error) {
	in, p, size, appending, pos, dev := pr.in, pr.p, pr.size, pr.appending, pr.pos, pr.dev
	pr.free()
	err = eio(err)
	if err == nil && in.fs.sums != nil {
		err = in.fs.verifySums(in, pos, dev, p.Data) // a mismatch leaves no page
	}
	in.finishPageRead(p, err, size, appending)
}

// free returns pr to the pool, dropping what it referenced.
func (pr *pageRead) free() {
	*pr = pageRead{fn: pr.fn}
	pageReadPool.Put(pr)
}

// finishPageRead ends the read of page p, which startPageReads locked
// and referenced for it: with an error, p is removed (the next reader
// retries) and carries it; otherwise its bytes past size, the size when
// the read looked the mapping up (with appending, whether appends were in
// flight then), are zeroed and it is marked uptodate. Then p is unlocked
// and released.
func (in *inode) finishPageRead(p *pagecache.Page, err error, size int64, appending bool) {
	if err != nil {
		in.mu.Lock()
		if in.readErrs == nil {
			in.readErrs = map[uint64]error{}
		}
		in.readErrs[p.Index] = err
		in.mu.Unlock()
		p.ClearUptodate(err)
		in.pages.Remove(p)
	} else {
		if pglen := in.pageLen(p.Index, size); pglen < len(p.Data) {
			clear(p.Data[pglen:])
			in.uncacheEOFPage(p, appending)
		}
		p.SetUptodate()
	}
	p.Unlock()
	in.pages.Release(p)
}

// uncacheEOFPage takes page p, locked and just read, which holds EOF (its
// bytes past the size it was read at are zeros), out of the cache if
// appends were in flight when it was read: an append's publication could
// raise the size over those zeros after the page was read and before the
// append's own invalidation drops it, and a reader in between would copy
// them. The read that created p still copies from it (bufferedRead),
// within the size it sampled before, which is no larger than the one p was
// read at; other readers read the page again. Appends keep every page they touch exact:
// a direct append drops the cached pages of its range, before its I/O and
// after its publication, holding its blocks; a buffered one writes into
// them.
//
// Preconditions: p is locked.
func (in *inode) uncacheEOFPage(p *pagecache.Page, appending bool) {
	if appending {
		in.pages.Remove(p)
		in.fs.counters.AppendEOFPagesUncached.Add(1)
	}
}

// readGeneral reads, each run in its own goroutine, the locked pages
// (ascending) that need readRangeInto: a page whose blocks map to several
// extents, or any page on a device whose I/O unit is larger than a page.
// Consecutive pages inside one I/O unit are read together, so readahead
// reads each unit once rather than once per page. finish is called for
// every page.
func (in *inode) readGeneral(pages []*pagecache.Page, finish func(*pagecache.Page, error)) {
	ps := int64(in.fs.cache.PageSize())
	u := max(in.fs.ioUnit, ps)
	unitOf := func(p *pagecache.Page) int64 { return int64(p.Index) * ps / u }
	for len(pages) > 0 {
		n := 1
		for n < len(pages) && pages[n].Index == pages[n-1].Index+1 && unitOf(pages[n]) == unitOf(pages[0]) {
			n++
		}
		run := slices.Clone(pages[:n]) // the caller's pages is not kept
		pages = pages[n:]
		go func() {
			buf := run[0].Data
			if len(run) > 1 {
				buf = device.AlignedBuf(len(run) * int(ps))
			}
			_, err := in.readRangeInto(buf, int64(run[0].Index)*ps)
			for i, p := range run {
				if err == nil && len(run) > 1 {
					copy(p.Data, buf[int64(i)*ps:])
				}
				finish(p, err)
			}
		}()
	}
}

// bufferedWrite copies the caller's bytes into the page cache (the
// kernel's generic_perform_write under xfs_file_buffered_write): the I/O
// lock is taken exclusive, in-flight direct I/O is drained (so a buffered
// write never reads a block that a direct write is still changing), and
// each page is read first only where the read-before-write rule says so.
func (in *inode) bufferedWrite(k *kiocb) (int, error) {
	fs := in.fs
	if len(k.buf) == 0 && !k.append {
		return 0, nil
	}
	if k.nowait && k.dsync {
		// The write-through and the sync would block.
		return 0, fs.nowaitEAGAIN(nwSync)
	}
	if !k.nowait {
		fs.cache.ThrottleDirty()
	}
	if err := in.lockIO(iolock.Exclusive, k.nowait); err != nil {
		return 0, err
	}
	fs.counters.LockExclBuffered.Add(1)
	fs.counters.BufferedWrites.Add(1)
	if k.nowait && in.dio.InFlight() > 0 {
		in.io.Unlock(iolock.Exclusive)
		return 0, fs.nowaitEAGAIN(nwDrain)
	}
	in.drain()
	if _, err := in.writeChecks(k, iolock.Exclusive); err != nil {
		in.io.Unlock(iolock.Exclusive)
		return 0, err
	}
	if len(k.buf) == 0 {
		in.io.Unlock(iolock.Exclusive)
		return 0, nil
	}
	// Shared blocks are copied first: the pages then go back to blocks
	// of the file's own (cow.go).
	if in.fs.shared.Any() {
		if k.nowait && in.sharing() {
			in.io.Unlock(iolock.Exclusive)
			return 0, fs.nowaitEAGAIN(nwAllocate)
		}
		if err := in.unshareRange(k.off, k.off+int64(len(k.buf))); err != nil {
			in.io.Unlock(iolock.Exclusive)
			return 0, err
		}
	}
	done, err := in.copyToPages(k, true)
	in.io.Unlock(iolock.Exclusive)
	if done == 0 {
		return 0, err
	}
	return in.bufferedWriteDone(k, done)
}

// copyToPages copies k's bytes into the page cache at k.off, page by page,
// reserving space for the blocks it dirties over holes (delayed
// allocation), and returns how many it copied: fewer than asked only with
// an error. With publish (a buffered write under the exclusive lock) it
// raises the size as it goes, so that pages after the first are judged
// against the new EOF; without (a parallel append, whose size its
// publication raises in reservation order) every page is judged against
// k.off, which every byte before it will have reached by then.
//
// Preconditions: in.io is held exclusive, or shared with k's blocks held in
// in.ranges (a parallel append).
func (in *inode) copyToPages(k *kiocb, publish bool) (int64, error) {
	fs := in.fs
	ps := int64(fs.cache.PageSize())
	end := k.off + int64(len(k.buf))
	size := in.size()
	if !publish {
		size = k.off
	}
	done := int64(0)
	var err error
	for pos := k.off; pos < end; {
		idx := uint64(pos / ps)
		from := int(pos % ps)
		to := int(min(ps, end-int64(idx)*ps))
		blk := uint64(int64(idx) * ps / fs.blockSize)
		var reserved bool
		if reserved, err = in.reserveDelalloc(blk); err != nil {
			break
		}
		// Publish the size as the write proceeds, so that pages after
		// this one are judged against the new EOF, and before the page
		// is unlocked (as generic_write_end raises i_size before it
		// unlocks the folio): writeback, which locks the page, never
		// writes it back while the size leaves it past EOF, so the
		// conversion a sync point makes durable never says written past
		// the size it commits with it.
		grow := int64(0)
		if next := pos + int64(to-from); publish && next > size {
			grow = next
		}
		var grown int64
		if grown, err = in.writePage(idx, from, to, k.buf[done:done+int64(to-from)], size, grow, k.nowait, k.dontcache); err != nil {
			if reserved { // writePage fails before it dirties anything
				in.unreserveDelalloc(blk)
			}
			break
		}
		done += int64(to - from)
		pos += int64(to - from)
		if grow > 0 {
			size = grown
			fs.markDirty(in)
		}
	}
	return done, err
}

// bufferedWriteDone is what a buffered write that copied done bytes does
// after it released the I/O lock: write them through and sync for
// O_DSYNC, or start their writeback for an uncached write.
func (in *inode) bufferedWriteDone(k *kiocb, done int64) (int, error) {
	if k.dsync {
		if err := in.writeback(k.off, k.off+done, true); err != nil {
			return 0, err
		}
		if err := in.pages.TakeError(); err != nil {
			return 0, err
		}
		if err := k.syncWritten(); err != nil {
			return 0, err
		}
	} else if k.dontcache && !k.nowait {
		// Start the writeback of what the uncached write dirtied,
		// without waiting for it (filemap_fdatawrite_range_kick): its
		// pages are dropped when their writeback ends (writebackRun),
		// and an error stays in the mapping for the next fsync. A
		// NOWAIT write (the ring's inline attempt) must not block on
		// the allocation and page locks a writeback takes, so it
		// leaves its pages to the flusher, which drops them the same
		// way. (A goroutine per NOWAIT write, counted for SyncAll, let
		// a stream of them keep SyncAll waiting forever:
		// TestDontCacheNoWaitSyncAll.)
		_ = in.writeback(k.off, k.off+done, false)
	}
	return int(done), nil
}

// usedDropBehind is called when a buffered read has copied from page p,
// referenced, which uncached I/O marked to be dropped: an uncached read
// drops it if it is clean (filemap_end_dropbehind_read), waiting for the
// page lock if it may block (a page that just became uptodate is still
// locked until its read completion returns); a cached read keeps it
// cached, unmarked, as the kernel's lookups without FGP_DONTCACHE do.
func (in *inode) usedDropBehind(p *pagecache.Page, dontcache, wait bool) {
	if !dontcache {
		p.ClearDropBehind()
		return
	}
	in.dropIfClean(p, wait)
}

// dropIfClean drops page p, referenced and marked drop-behind, from the
// cache if it is clean. With wait it waits for the page lock; without, it
// never blocks (folio_end_dropbehind's trylock), so it runs in completions
// and NOWAIT calls: a locked page (a read completion that has marked it
// uptodate but not yet unlocked it, say) is dropped at its unlock, by a
// callback on the unlocking goroutine. A page dirtied again, under
// writeback or busy then stays, counted as DontCacheBusy; its next
// writeback or uncached read drops it.
func (in *inode) dropIfClean(p *pagecache.Page, wait bool) {
	if wait {
		p.Lock()
	} else if !p.TryLock() {
		in.dropAtUnlock(p)
		return
	}
	in.dropCleanLocked(p)
	p.Unlock()
}

// dropAtUnlock arms the drop of page p, referenced and locked by someone
// else, at its unlock. The callback holds a reference of its own.
func (in *inode) dropAtUnlock(p *pagecache.Page) {
	q := in.pages.Get(p.Index)
	if q != p { // removed meanwhile
		if q != nil {
			in.pages.Release(q)
		}
		return
	}
	drop := func() {
		if q.TryLock() {
			in.dropCleanLocked(q)
			q.Unlock()
		} else {
			in.fs.counters.DontCacheBusy.Add(1)
		}
		in.pages.Release(q)
	}
	if q.WaitUnlockedAsync(drop) {
		drop() // unlocked meanwhile
	}
}

// dropCleanLocked is the decision of dropIfClean.
//
// Preconditions: p is locked and referenced.
func (in *inode) dropCleanLocked(p *pagecache.Page) {
	switch {
	case p.Removed():
	case p.Dirty() || p.Writeback() || !p.DropBehind():
		in.fs.counters.DontCacheBusy.Add(1)
	default:
		in.pages.Remove(p)
		in.fs.counters.DontCacheDropped.Add(1)
	}
}

// writePage copies data into bytes [from, to) of page idx; size is the EOF
// the page is judged against (readBeforeWrite). With grow > 0, the size is
// raised to grow (if smaller) before the page is unlocked, and the size
// after that is returned.
//
// Preconditions: as copyToPages.
func (in *inode) writePage(idx uint64, from, to int, data []byte, size, grow int64, nowait, dontcache bool) (grown int64, err error) {
	for {
		p, created, err := in.pages.GetOrCreate(idx, nowait)
		if err != nil {
			if err == pagecache.ErrNoRoom && nowait {
				return 0, in.fs.nowaitEAGAIN(nwCacheFull)
			}
			return 0, eio(err)
		}
		switch {
		case created && dontcache:
			p.SetDropBehind() // dropped when its writeback ends
		case !created && !dontcache && p.DropBehind():
			p.ClearDropBehind()
		}
		if !created {
			if nowait {
				if !p.TryLock() {
					in.pages.Release(p)
					return 0, in.fs.nowaitEAGAIN(nwPageBusy)
				}
			} else {
				p.Lock()
			}
			if p.Removed() {
				p.Unlock()
				in.pages.Release(p)
				continue
			}
		}
		err = in.writePageLocked(p, from, to, data, size, nowait)
		if err == nil && grow > 0 {
			in.mu.Lock()
			if uint64(grow) > in.attr.Size {
				in.attr.Size = uint64(grow)
			}
			in.attrDirty = true
			grown = int64(in.attr.Size)
			in.mu.Unlock()
		}
		if h := in.fs.hooks.pageWritten; h != nil && err == nil {
			h(in, p)
		}
		p.Unlock()
		in.pages.Release(p)
		return grown, err
	}
}

// writePageLocked is writePage with page p locked.
func (in *inode) writePageLocked(p *pagecache.Page, from, to int, data []byte, size int64, nowait bool) error {
	fs := in.fs
	vf, vt := p.Valid()
	why := readBeforeWrite(fs.policy, rbwWrite{
		uptodate: p.Uptodate(), pending: p.WritePending(), vf: vf, vt: vt,
		from: from, to: to, pglen: in.pageLen(p.Index, size),
		pageSize: len(p.Data), ioUnit: int(fs.ioUnit),
	})
	fs.countRBW(why)
	if why.read() {
		if nowait {
			return fs.nowaitEAGAIN(nwPageRead)
		}
		// The pending bytes, if any, are kept; the page becomes uptodate.
		if err := in.readPageLocked(p); err != nil {
			return err
		}
	}
	if !p.Uptodate() {
		// A page that holds nothing yet is zeroed (page buffers are
		// recycled uncleared).
		if vf == vt {
			clear(p.Data)
		}
		if why == rbwFullWrite {
			// Bytes outside the write are past EOF, so zero: every byte
			// is known and the page is uptodate (nfs_write_end).
			clear(p.Data[:from])
			clear(p.Data[to:])
			copy(p.Data[from:to], data)
			p.MarkDirty(from, to)
			p.SetUptodate()
			return nil
		}
	}
	copy(p.Data[from:to], data)
	p.MarkDirty(from, to)
	return nil
}

// readPageLocked reads page p in from the device, keeping any valid
// (pending-write) bytes it holds, and marks it uptodate. Bytes past EOF
// (the size when the read looked the mapping up, with p locked: see
// startPageReads) read as zero.
//
// Preconditions: p is locked.
func (in *inode) readPageLocked(p *pagecache.Page) error {
	// Bytes of p written back while not uptodate stop counting as valid
	// once another write dirties the page (MarkDirty), but they are the
	// file's bytes only once their writeback has reached the device:
	// reading it before would fill them with what was there before, and
	// the page, then uptodate, would be written back whole over them.
	p.WaitWriteback()
	ps := len(p.Data)
	pos := int64(p.Index) * int64(ps)
	vf, vt := p.Valid()
	tmp := p.Data
	partial := !p.Uptodate() && vf < vt
	if partial {
		tmp = device.AlignedBuf(ps)
	}
	size, err := in.readRangeInto(tmp, pos)
	if err != nil {
		if !p.Dirty() {
			// Nothing to keep: drop the page so that the next reader
			// tries the device again instead of inheriting this error.
			in.pages.Remove(p)
		}
		p.ClearUptodate(err)
		return err
	}
	if pglen := in.pageLen(p.Index, size); pglen < ps {
		clear(tmp[pglen:])
	}
	if partial {
		copy(tmp[vf:vt], p.Data[vf:vt])
		copy(p.Data, tmp)
	}
	p.SetUptodate()
	return nil
}

// readRangeInto fills buf (whole pages, page-aligned in the file at pos)
// with the file's bytes from the device: holes and unwritten extents are
// zeros. On a device whose I/O unit is larger than buf, the unit is read
// into a bounce buffer. It returns the size as it was when it looked the
// mapping up.
func (in *inode) readRangeInto(buf []byte, pos int64) (size int64, err error) {
	fs := in.fs
	end := pos + int64(len(buf))
	in.mu.Lock()
	m, err := in.extentsLocked()
	size = int64(in.attr.Size)
	if err != nil {
		in.mu.Unlock()
		return size, err
	}
	first, nb := fs.blockRange(pos, end)
	segs := m.Lookup(first, nb, nil)
	in.mu.Unlock()
	b := newBatch(fs)
	for _, s := range segs {
		lo, hi := fs.clip(s, pos, end)
		part := buf[lo-pos : hi-pos]
		if s.Hole || s.State != meta.Written {
			clear(part)
			continue
		}
		fs.counters.CacheReads.Add(1)
		devOff := fs.devOffset(s, lo)
		if u := fs.ioUnit; devOff%u != 0 || int64(len(part))%u != 0 {
			ubase := roundDown(devOff, u)
			ulen := roundUp(devOff+int64(len(part)), u) - ubase
			bounce := device.AlignedBuf(int(ulen))
			// The unit's file range, within this extent: its other
			// pages are filled from the same read.
			fbase := lo - (devOff - ubase)
			segLo, segHi := fs.clip(s, fbase, fbase+ulen)
			nb := in.claimNeighbourPages(segLo, segHi)
			err := device.ReadAt(fs.dev, bounce, ubase)
			in.fillNeighbourPages(nb, bounce, fbase, err)
			if err != nil {
				return size, eio(err)
			}
			copy(part, bounce[devOff-ubase:])
			continue
		}
		b.addRead(in, lo, part, devOff)
	}
	return size, b.run()
}
