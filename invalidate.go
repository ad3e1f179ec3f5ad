package sluice

// Page-cache coherence for direct I/O and space operations: write back
// and drop the cached pages of a range (invalidateRange, the kernel's
// kiocb_invalidate_pages), write back only (writebackRange, before a direct
// read), or ask whether doing so could wait (cachedInRange, for NOWAIT).
// It calls down into writeback.

// invalidateRange writes back and then drops the cached pages holding
// bytes of [off, end) (kiocb_invalidate_pages): each page is locked and its
// writeback waited for before it is removed, so waiters look it up again.
func (in *inode) invalidateRange(off, end int64) error {
	if in.pages.Len() == 0 && !in.writebackBusy() {
		return nil
	}
	first, last := in.pageRange(off, end)
	if err := in.writebackPages(first, last, true); err != nil {
		return err
	}
	in.dropPages(first, last)
	return nil
}

// dropPages removes pages first..last without writing them back.
func (in *inode) dropPages(first, last uint64) {
	ps := in.pages.Range(first, last)
	for _, p := range ps {
		p.Lock()
		p.WaitWriteback()
		in.pages.Remove(p)
		p.Unlock()
	}
	in.pages.ReleaseAll(ps)
}

// writebackRange writes back (and waits for) the dirty pages holding bytes
// of [off, end): what a direct read does first under the concurrent
// policy. With nowait, any dirty page there gives EAGAIN.
func (in *inode) writebackRange(off, end int64, nowait bool) error {
	first, last := in.pageRange(off, end)
	if !in.pages.HasDirty(first, last) {
		return nil
	}
	if nowait {
		return in.fs.nowaitEAGAIN(nwCachedPages)
	}
	if err := in.writebackPages(first, last, true); err != nil {
		return err
	}
	return nil
}

// cachedInRange reports whether any page holding bytes of [off, end) is
// cached or any block writeback is in flight: invalidating the range could
// then wait.
func (in *inode) cachedInRange(off, end int64) bool {
	if in.pages.Len() == 0 {
		return in.writebackBusy()
	}
	first, last := in.pageRange(off, end)
	ps := in.pages.Range(first, last)
	in.pages.ReleaseAll(ps)
	return len(ps) > 0 || in.writebackBusy()
}
