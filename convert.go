package sluice

// Unwritten to written: convertWritten is the one place extents are
// converted once the device holds their data, for direct-write completion
// and writeback alike. It calls only the extent map and the transaction.

// fileRange is a run of file blocks.
type fileRange struct{ first, n uint64 }

// convertWritten is the one place unwritten extents become written, once
// the device holds their data (a direct write's completion, a writeback's):
// the ranges conv are converted in core at once, so reads see the data,
// stamped with the current conversion epoch, so that their records say
// written only after the sync point whose device flush made the data
// durable (extmap epochs; see the package doc's Durability). The extent
// records it commits, in one transaction, still say unwritten; with
// publish, the same transaction raises the size to end (never shrinking:
// racing completions leave the largest end) and records the inode. The
// inode joins the dirty set while conversions are pending.
func (in *inode) convertWritten(conv []fileRange, end int64, publish bool) error {
	in.mu.Lock()
	dirty, err := in.convertWrittenLocked(conv, end, publish)
	in.mu.Unlock()
	if dirty {
		in.fs.markDirty(in)
	}
	return err
}

// convertWrittenLocked is convertWritten, reporting instead of doing
// whether the inode must join the dirty set (conversions are pending).
//
// Preconditions: in.mu is held.
func (in *inode) convertWrittenLocked(conv []fileRange, end int64, publish bool) (dirty bool, err error) {
	fs := in.fs
	err = fs.transact(func(t *txn) error {
		epoch := fs.convEpoch.Load()
		for _, r := range conv {
			in.ext.Convert(r.first, r.n, epoch, t.extents(in.ino))
		}
		if publish {
			if uint64(end) > in.attr.Size {
				in.attr.Size = uint64(end)
			}
			t.putInode(&in.attr)
			in.attrDirty = false
		}
		return nil
	})
	return in.ext != nil && in.ext.Pending(), err
}

// convertWrittenBack converts the unwritten blocks a writeback wrote. While
// appends are in flight, blocks that lie wholly past the size belong to a
// buffered append not yet published: they stay unwritten, recorded in
// in.appendConv, and the append's publication converts them, so that the
// metadata never says written past the size (appends.go).
func (in *inode) convertWrittenBack(conv []fileRange) error {
	fs := in.fs
	in.mu.Lock()
	if in.appends.pending.Load() > 0 {
		fb := uint64(roundUp(int64(in.attr.Size), fs.blockSize) / fs.blockSize)
		keep := conv[:0:0]
		for _, c := range conv {
			if c.first < fb {
				keep = append(keep, fileRange{c.first, min(c.n, fb-c.first)})
			}
			if c.first+c.n > fb {
				lo := max(c.first, fb)
				in.appendConv = append(in.appendConv, fileRange{lo, c.first + c.n - lo})
				fs.counters.AppendConvDeferred.Add(1)
			}
		}
		conv = keep
	}
	var dirty bool
	var err error
	if len(conv) > 0 {
		dirty, err = in.convertWrittenLocked(conv, 0, false)
	}
	in.mu.Unlock()
	if dirty {
		fs.markDirty(in)
	}
	return err
}
