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
	fs := in.fs
	in.mu.Lock()
	err := fs.transact(func(t *txn) error {
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
	pending := in.ext != nil && in.ext.Pending()
	in.mu.Unlock()
	if pending {
		fs.markDirty(in)
	}
	return err
}
