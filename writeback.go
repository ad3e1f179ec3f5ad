package sluice

import (
	"sync"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/lockrank"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/pagecache"
)

// Writeback: dirty pages reach the device block by block. A page is locked
// while its bytes are copied and its writeback bit set, then unlocked;
// truncate, punch and invalidation lock each page and wait for its
// writeback before they free blocks, so a writeback never lands on a
// freed block. Newly allocated blocks go through the same durability
// ordering as direct writes: allocated unwritten, written, converted with an
// epoch, made durable by the next sync point.

// fsync writes back the file's dirty pages (writebackForSync), then runs a
// sync point.
func (in *inode) fsync() error {
	if err := in.writebackForSync(); err != nil {
		return err
	}
	return in.fs.group.sync()
}

// fdatasync is fsync for the data: the dirty pages written back as fsync
// writes them, then syncData.
func (in *inode) fdatasync() error {
	if err := in.writebackForSync(); err != nil {
		return err
	}
	return in.syncData()
}

// writebackForSync writes back the file's dirty pages and reports a
// writeback error if one happened since the last fsync (the pages stay
// dirty: a failed writeback is never reported as durable later).
func (in *inode) writebackForSync() error {
	if err := in.fs.writable(); err != nil {
		return err
	}
	werr := in.writebackPages(0, ^uint64(0), true)
	if err := in.pages.TakeError(); err != nil {
		return err
	}
	return werr
}

// syncData makes the file's completed writes durable with the metadata
// needed to read them back (fdatasync, O_DSYNC). When that metadata is
// durable already (no conversion or remap pending, no deferred record or
// delayed allocation, the size as committed, its last record change
// synced: inode.metaSeq), a device flush does it, as XFS's fdatasync
// forces no log when only timestamps changed (xfs_file_fsync,
// ili_fsync_fields); otherwise a sync point.
func (in *inode) syncData() error {
	fs := in.fs
	in.mu.Lock()
	flushOnly := in.metaSeq <= fs.syncedSeq.Load() && in.attr.Size == in.committedSize &&
		len(in.recs) == 0 && (in.ext == nil || !in.ext.Pending()) && len(in.delalloc) == 0
	in.mu.Unlock()
	if !flushOnly {
		return fs.group.sync()
	}
	if err := fs.flushDevice(); err != nil {
		return err
	}
	fs.counters.DataSyncsFlushOnly.Add(1)
	return nil
}

// writebackAll writes back every dirty page of the file system and waits.
func (fs *FS) writebackAll() error {
	var firstErr error
	for _, m := range fs.cache.DirtyMappings() {
		in := m.Owner.(*inode)
		if err := in.writebackPages(0, ^uint64(0), true); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// flusher is the background writeback thread: it writes back files whose
// dirty pages are older than WritebackAge, and, when the cache kicks it
// (too many dirty pages, or no room for a new page), the oldest files
// until the cache is below its dirty limit.
func (fs *FS) flusher() {
	defer fs.bg.Done()
	t := time.NewTicker(max(fs.opts.WritebackAge/5, 10*time.Millisecond))
	defer t.Stop()
	for {
		pressure := false
		select {
		case <-fs.closing:
			return
		case <-fs.cache.Kick():
			pressure = true
		case <-t.C:
		}
		if fs.shutdownErr() != nil {
			continue
		}
		cutoff := time.Now().Add(-fs.opts.WritebackAge)
		for _, m := range fs.cache.DirtyMappings() {
			old := m.OldestDirty()
			if !pressure && (old.IsZero() || old.After(cutoff)) {
				continue
			}
			in := m.Owner.(*inode)
			_ = in.writebackPages(0, ^uint64(0), false)
			if pressure && !fs.cache.OverDirtyLimit() {
				break
			}
		}
	}
}

// writeback writes back the dirty pages holding bytes of [off, end), and
// with wait, waits for them (and for writebacks already in flight there).
func (in *inode) writeback(off, end int64, wait bool) error {
	first, last := in.pageRange(off, end)
	return in.writebackPages(first, last, wait)
}

// writebackPages writes back dirty pages first..last, block by block. With
// wait it returns once every writeback of those blocks, including ones
// started earlier by others (the flusher), has ended.
func (in *inode) writebackPages(first, last uint64, wait bool) error {
	fs := in.fs
	ppb := uint64(fs.blockSize) / uint64(fs.cache.PageSize())
	idxs := in.pages.DirtyIndexes(first, last)
	var wg sync.WaitGroup
	var errMu lockrank.Mutex[lockrank.Leaf]
	var firstErr error
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	maxRun := uint64(max(1, maxRunBytes/fs.blockSize))
	for i := 0; i < len(idxs); {
		// A run: consecutive blocks that each hold a dirty page.
		blk := idxs[i] / ppb
		n := uint64(1)
		j := i
		for j < len(idxs) {
			b := idxs[j] / ppb
			if b == blk+n-1 {
				j++
				continue
			}
			if b == blk+n && n < maxRun {
				n++
				j++
				continue
			}
			break
		}
		wg.Add(1)
		if err := in.writebackRun(blk, n, func(err error) {
			if err != nil {
				fail(err)
			}
			wg.Done()
		}); err != nil {
			fail(err)
		}
		i = j
	}
	if wait {
		wg.Wait()
		if last >= first {
			in.waitBlocksIdle(first/ppb, last/ppb)
		}
	}
	errMu.Lock()
	defer errMu.Unlock()
	return firstErr
}

// span is a byte range within a run of blocks.
type span struct{ lo, hi int64 }

// maxRunBytes caps one writeback run: contiguous dirty blocks go to the
// device as one request of up to this size.
const maxRunBytes = 1 << 20

// writebackRun writes back the dirty pages of the n consecutive file blocks
// from blk, merging what is contiguous on the device into single requests,
// and calls done exactly once when the writes end. An error returned was
// also given to done.
func (in *inode) writebackRun(blk, n uint64, done func(error)) error {
	fs := in.fs
	ps := int64(fs.cache.PageSize())
	bs := fs.blockSize
	ppb := uint64(bs / ps)
	for b := blk; b < blk+n; b++ { // ascending, so claims cannot deadlock
		in.beginBlockWriteback(b)
	}
	fs.writebacks.begin()
	pages := in.pages.Range(blk*ppb, (blk+n)*ppb-1)
	bounce := device.AlignedBuf(int(int64(n) * bs))
	var covered, dirty []span
	var wb []*pagecache.Page
	for _, p := range pages {
		p.Lock()
		if !p.Removed() {
			off := int64(p.Index-blk*ppb) * ps
			var s span
			if p.Uptodate() {
				s = span{off, off + ps}
			} else {
				vf, vt := p.Valid()
				s = span{off + int64(vf), off + int64(vt)}
			}
			copy(bounce[s.lo:s.hi], p.Data[s.lo-off:s.hi-off])
			if s.hi > s.lo {
				covered = append(covered, s)
			}
			if p.StartWriteback() {
				wb = append(wb, p)
				dirty = append(dirty, s)
			}
		}
		p.Unlock()
	}
	release := func(err error) {
		for _, p := range wb {
			p.EndWriteback(err)
			if err == nil && p.DropBehind() {
				in.dropIfClean(p, false) // an uncached write's page, now clean
			}
		}
		for b := blk; b < blk+n; b++ {
			in.endBlockWriteback(b)
		}
		fs.writebacks.end()
		if err != nil {
			fs.counters.WritebackErrors.Add(1)
		} else {
			fs.counters.CacheWritebackPages.Add(int64(len(wb)))
		}
		in.pages.ReleaseAll(pages)
		done(err)
	}
	if len(wb) == 0 {
		release(nil)
		return nil
	}
	// Map the run, allocating its holes (unwritten), from the delayed
	// allocation reservations where the buffered writes made them.
	in.mu.Lock()
	m, err := in.extentsLocked()
	var segs []extmap.Segment
	if err == nil {
		segs = m.Lookup(blk, n, nil)
		var reserved uint64
		holes := false
		for _, sg := range segs {
			if sg.Hole {
				holes = true
				for b := sg.FileBlock; b < sg.FileBlock+sg.Len; b++ {
					if in.takeDelallocLocked(b) { // used up, or given back on error
						reserved++
					}
				}
			}
		}
		if holes {
			err = fs.transact(func(t *txn) error { return in.allocateLocked(t, blk, n, reserved) })
			if err == nil {
				segs = m.Lookup(blk, n, segs[:0])
			}
		}
		// Shared blocks are never written in place: no dirty byte may
		// lie in one (the write paths copy a shared block before they
		// dirty its pages). A run may still span shared blocks it has
		// nothing to write in: a run claims its blocks before a clone
		// that writes some of them back and shares them.
		for _, s := range in.sharedSegsLocked(blk, n) {
			if fs.sums != nil {
				break // written out of place (writebackCow)
			}
			lo, hi := int64(s.FileBlock-blk)*bs, int64(s.End()-blk)*bs
			for _, d := range dirty {
				if err == nil && d.lo < hi && d.hi > lo {
					err = fs.sharedInPlace("writeback", in, s.FileBlock)
				}
			}
		}
	}
	in.mu.Unlock()
	if err != nil {
		release(err)
		return err
	}
	b := newBatch(fs)
	var conv []fileRange
	var cow []cowRange
	for _, sg := range segs {
		lo, hi := int64(sg.FileBlock-blk)*bs, int64(sg.FileBlock-blk+sg.Len)*bs
		dev := int64(sg.DevBlock) * bs
		if sg.State != meta.Written {
			// Unwritten: all of it, with zeros wherever no page holds
			// valid bytes (they read as zeros now).
			b.add(device.OpWrite, bounce[lo:hi], dev)
			conv = append(conv, fileRange{sg.FileBlock, sg.Len})
			continue
		}
		var err error
		if fs.sums != nil {
			cow, err = in.writebackCow(b, bounce, blk, sg, covered, dirty, cow)
		} else {
			err = in.planWritten(b, bounce, blk, lo, hi, dev, covered, dirty)
		}
		if err != nil {
			fs.returnStaging(cow)
			release(err)
			return err
		}
	}
	if len(b.reqs) == 0 {
		release(nil)
		return nil
	}
	b.finish = func(err error) {
		if err != nil && len(cow) > 0 {
			fs.returnStaging(cow) // the staging blocks hold nothing of ours
		}
		if err != nil || len(conv) == 0 && len(cow) == 0 {
			release(err)
			return
		}
		go func() { release(in.convertWrittenBack(conv, cow)) }()
	}
	b.submit()
	return nil
}

// planWritten adds the writes of the dirty bytes of the written part
// [lo, hi) of a run from file block blk (device offset dev) to b, one per
// run of dirty I/O units. A dirty unit that valid cached bytes do not
// wholly cover is read back from the device first (readBeforeWrite's
// rbwUnitNotCached: read-modify-write at the device's I/O unit).
func (in *inode) planWritten(b *ioBatch, bounce []byte, blk uint64, lo, hi, dev int64, covered, dirty []span) error {
	fs := in.fs
	u := fs.ioUnit
	n := (hi - lo) / u
	isDirty := make([]bool, n)
	for _, d := range dirty {
		for c := max(d.lo, lo) / u; c*u < min(d.hi, hi); c++ {
			isDirty[c-lo/u] = true
		}
	}
	for c := int64(0); c < n; c++ {
		ulo := lo + c*u
		if !isDirty[c] {
			continue
		}
		why := readBeforeWrite(fs.policy, rbwWrite{kind: rbwWriteback, uptodate: spansCover(covered, ulo, ulo+u)})
		if !why.read() {
			continue
		}
		fs.countRBW(why)
		tmp := device.AlignedBuf(int(u))
		fileLo := int64(blk)*fs.blockSize + ulo
		nb := in.claimNeighbourPages(fileLo, fileLo+u)
		err := device.ReadAt(fs.dev, tmp, dev+c*u)
		in.fillNeighbourPages(nb, tmp, fileLo, err)
		if err != nil {
			return eio(err)
		}
		// Keep the cached valid bytes; take the rest from the device.
		for _, s := range covered {
			a, z := max(s.lo, ulo), min(s.hi, ulo+u)
			if a < z {
				copy(tmp[a-ulo:z-ulo], bounce[a:z])
			}
		}
		copy(bounce[ulo:ulo+u], tmp)
	}
	for c := int64(0); c < n; {
		if !isDirty[c] {
			c++
			continue
		}
		e := c
		for e < n && isDirty[e] {
			e++
		}
		b.add(device.OpWrite, bounce[lo+c*u:lo+e*u], dev+c*u)
		c = e
	}
	return nil
}

// writebackCow adds to b the writes of the blocks of the written segment
// sg (of the run from file block blk) that hold dirty bytes, on a
// checksummed volume: whole blocks, never in place (sums.go). A block the
// cached valid bytes do not cover is read first (verified) and the cached
// bytes laid over it; each goes to a staging block, remapped at completion
// (appended to cow, which it returns).
func (in *inode) writebackCow(b *ioBatch, bounce []byte, blk uint64, sg extmap.Segment, covered, dirty []span, cow []cowRange) ([]cowRange, error) {
	fs := in.fs
	bs := fs.blockSize
	var runs []fileRange // runs of blocks with dirty bytes
	for fb := sg.FileBlock; fb < sg.End(); fb++ {
		lo, hi := int64(fb-blk)*bs, int64(fb-blk+1)*bs
		isDirty := false
		for _, d := range dirty {
			isDirty = isDirty || d.lo < hi && d.hi > lo
		}
		if !isDirty {
			continue
		}
		if !spansCover(covered, lo, hi) {
			tmp := device.AlignedBuf(int(bs))
			if err := in.readVerified(tmp, sg.DevBlock+(fb-sg.FileBlock), int64(fb)*bs); err != nil {
				return cow, err
			}
			for _, s := range covered {
				if a, z := max(s.lo, lo), min(s.hi, hi); a < z {
					copy(tmp[a-lo:z-lo], bounce[a:z])
				}
			}
			copy(bounce[lo:hi], tmp)
			fs.counters.SumRewrites.Add(1)
		}
		if n := len(runs); n > 0 && runs[n-1].first+runs[n-1].n == fb {
			runs[n-1].n++
		} else {
			runs = append(runs, fileRange{fb, 1})
		}
	}
	for _, r := range runs {
		stage, err := fs.takeStaging(r.n, sg.DevBlock)
		if err != nil {
			return cow, err
		}
		fb := r.first
		for _, st := range stage {
			lo := int64(fb-blk) * bs
			b.add(device.OpWrite, bounce[lo:lo+int64(st.Len)*bs], int64(st.Start)*bs)
			cow = append(cow, cowRange{fb: fb, n: st.Len, dev: st.Start})
			fb += st.Len
		}
	}
	return cow, nil
}

// spansCover reports whether the union of ss covers [lo, hi).
func spansCover(ss []span, lo, hi int64) bool {
	for lo < hi {
		advanced := false
		for _, s := range ss {
			if s.lo <= lo && s.hi > lo {
				lo = s.hi
				advanced = true
			}
		}
		if !advanced {
			return false
		}
	}
	return true
}

// Block writebacks are serialised: one writeback of a block at a time
// (in.wbBusy). A writeback copies the whole block and may write all of it,
// and the device does not order overlapping writes in flight, so two
// writebacks of one block could land in either order and the older win.
// Waiting on a block's writeback never needs a page lock (completion takes
// none), and a writeback takes its page locks only after it owns the
// block, so the two cannot deadlock.

// beginBlockWriteback waits until no writeback of blk is in flight and
// claims it.
func (in *inode) beginBlockWriteback(blk uint64) {
	in.mu.Lock()
	for {
		ch, busy := in.wbBusy[blk]
		if !busy {
			break
		}
		in.mu.Unlock()
		<-ch
		in.mu.Lock()
	}
	if in.wbBusy == nil {
		in.wbBusy = map[uint64]chan struct{}{}
	}
	in.wbBusy[blk] = make(chan struct{})
	in.mu.Unlock()
}

// endBlockWriteback releases blk's writeback and wakes its waiters.
func (in *inode) endBlockWriteback(blk uint64) {
	in.mu.Lock()
	ch := in.wbBusy[blk]
	delete(in.wbBusy, blk)
	in.mu.Unlock()
	close(ch)
}

// writebackBusy reports whether any block writeback is in flight.
func (in *inode) writebackBusy() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.wbBusy) > 0
}

// waitBlocksIdle waits until no writeback of a block in [first, last] is in
// flight (before blocks are freed, zeroed or written directly).
func (in *inode) waitBlocksIdle(first, last uint64) {
	for {
		in.mu.Lock()
		var ch chan struct{}
		for blk, c := range in.wbBusy {
			if blk >= first && blk <= last {
				ch = c
				break
			}
		}
		in.mu.Unlock()
		if ch == nil {
			return
		}
		<-ch
	}
}
