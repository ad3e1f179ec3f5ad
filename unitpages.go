package sluice

import "github.com/sluicefs/sluice/pagecache"

// Whole I/O units: when a device unit is read for one page (a buffered
// read, a page read before a write, the read-back at writeback), the
// unit's other uncached pages are claimed before the read and filled from
// it. Used by the buffered path and writeback; it calls only the page
// cache.

// claimNeighbourPages creates, locked, the pages wholly inside the file
// range [lo, hi) and below EOF that are not cached, before an I/O unit
// holding them is read for another page, so that the read fills them too
// (fillNeighbourPages) instead of the next access to them reading the
// whole unit again. Creating them locked before the read is what makes
// this safe: a direct write's invalidation of the range, or a truncate,
// locks each page and so waits for the fill and then drops it; a page it
// did not find was created after the write completed and reads its data.
// Pages that exist are left alone, and none is created where the cache
// has no room without waiting.
func (in *inode) claimNeighbourPages(lo, hi int64) []*pagecache.Page {
	ps := int64(in.fs.cache.PageSize())
	hi = min(hi, roundUp(in.size(), ps))
	var out []*pagecache.Page
	for pos := roundUp(lo, ps); pos+ps <= hi; pos += ps {
		p, created, err := in.pages.GetOrCreate(uint64(pos/ps), true)
		if err != nil {
			break
		}
		if !created {
			in.pages.Release(p)
			continue
		}
		out = append(out, p)
	}
	return out
}

// fillNeighbourPages fills the pages claimed by claimNeighbourPages from
// unit, the bytes of the file from offset base, and marks them uptodate;
// after a failed read it drops them (nobody asked for them, so nobody is
// owed the error). Either way it unlocks and releases them.
func (in *inode) fillNeighbourPages(pages []*pagecache.Page, unit []byte, base int64, err error) {
	ps := int64(in.fs.cache.PageSize())
	in.mu.Lock()
	size := int64(in.attr.Size)
	appending := in.appends.pending.Load() > 0
	in.mu.Unlock()
	for _, p := range pages {
		pos := int64(p.Index) * ps
		if err != nil {
			in.pages.Remove(p)
		} else {
			copy(p.Data, unit[pos-base:])
			if pglen := in.pageLen(p.Index, size); pglen < int(ps) {
				clear(p.Data[pglen:])
				in.uncacheEOFPage(p, appending)
			}
			p.SetUptodate()
			in.fs.counters.UnitNeighbourPages.Add(1)
		}
		p.Unlock()
		in.pages.Release(p)
	}
}
