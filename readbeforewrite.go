package sluice

// The read-before-write rule (seed 004): readBeforeWrite decides, for a
// buffered write into a page, the writeback of a device I/O unit and
// in-place zeroing alike, whether the old bytes are read first, and
// countRBW counts the decision. It calls nothing.

// rbwReason is readBeforeWrite's answer: whether the old bytes are read
// before a write, and why.
type rbwReason uint8

const (
	// No read.
	rbwUptodate    rbwReason = iota // every byte is cached already
	rbwFullWrite                    // the write covers every byte of the page below EOF (or the page is wholly past EOF): the page becomes uptodate
	rbwPending                      // a write of the page is pending and this one extends its valid bytes contiguously
	rbwUnitAligned                  // the write's ends fall on the device's I/O unit (smaller than a page): writeback writes those units alone
	// Read first.
	rbwClassic       // classic policy (SkipFullPageRMW off): every page that is not uptodate
	rbwPartial       // a partial write of a page with nothing pending
	rbwIncompatible  // a pending write that this one cannot extend into one contiguous valid range
	rbwUnitNotCached // writeback of a device I/O unit that cached bytes do not wholly cover
	rbwZeroPartUnit  // zeroing on the device only part of an I/O unit (truncate, punch, EOF tail)
)

// read reports whether the decision is to read the old bytes first.
func (r rbwReason) read() bool { return r >= rbwClassic }

// rbwKind says what a write for readBeforeWrite is.
type rbwKind uint8

const (
	rbwPageWrite rbwKind = iota // a buffered write into a cached page
	rbwWriteback                // the write of a dirty device I/O unit at writeback
	rbwZeroing                  // zeroing part of a written block in place on the device
)

// rbwWrite describes a write for readBeforeWrite: bytes [from, to) of a
// page, or whole device I/O units (writeback, zeroing).
type rbwWrite struct {
	kind     rbwKind
	uptodate bool // every byte of the page (or units) is known: cached, or supplied by the write
	pending  bool // a write of the page is pending (dirty), holding bytes [vf, vt)
	vf, vt   int
	from, to int // the bytes this write supplies
	pglen    int // bytes of the page below EOF (0: the page is wholly past EOF)
	pageSize int
	ioUnit   int // the device's I/O unit
}

// readBeforeWrite is the read-before-write rule (seed 004, the NFS
// client's nfs_want_read_modify_write and its 2019 fix), the only place
// the engine decides to read old data before writing over part of it. A
// buffered write of bytes [from, to) of a page reads the old page first
// only if the page is not uptodate, the write does not cover every byte of
// the page below EOF, and no write of the page is already pending (unless
// the two cannot form one contiguous valid range: the pagecache keeps one
// per page, so the page is read; the NFS client flushes such an
// incompatible request instead). Even then, a write whose ends fall on
// the device's I/O unit (when it is smaller than a page) is not read
// around: writeback can write its units alone. Classic policy (before the
// fix): every write to a page that is not uptodate reads it first.
//
// The device takes whole I/O units, so a write that goes to the device
// (writeback of a dirty unit, zeroing part of a block in place) reads the
// unit first, whatever the policy, unless every byte of it is known.
func readBeforeWrite(pol Policy, w rbwWrite) rbwReason {
	switch {
	case w.uptodate:
		return rbwUptodate
	case w.kind == rbwWriteback:
		return rbwUnitNotCached
	case w.kind == rbwZeroing:
		return rbwZeroPartUnit
	case !pol.SkipFullPageRMW:
		return rbwClassic
	case w.pglen == 0 || w.from == 0 && w.to >= w.pglen:
		return rbwFullWrite
	case w.pending && (w.to < w.vf || w.from > w.vt):
		return rbwIncompatible
	case w.pending:
		return rbwPending
	case w.ioUnit < w.pageSize && w.from%w.ioUnit == 0 && (w.to%w.ioUnit == 0 || w.to >= w.pglen):
		return rbwUnitAligned
	}
	return rbwPartial
}

// countRBW counts a read-before-write decision.
func (fs *FS) countRBW(why rbwReason) {
	c := &fs.counters
	switch why {
	case rbwFullWrite:
		c.RBWSkipFullWrite.Add(1)
	case rbwPending:
		c.RBWSkipPending.Add(1)
	case rbwUnitAligned:
		c.RBWSkipUnitAligned.Add(1)
	case rbwClassic:
		c.RBWReadClassic.Add(1)
	case rbwPartial:
		c.RBWReadPartial.Add(1)
	case rbwIncompatible:
		c.RBWReadIncompatible.Add(1)
	case rbwUnitNotCached:
		c.CacheRMWUnitReads.Add(1)
	case rbwZeroPartUnit:
		c.RBWReadZeroUnit.Add(1)
	}
	if why == rbwFullWrite || why == rbwPending || why == rbwUnitAligned {
		c.CacheReadsAvoided.Add(1) // classic would have read
	}
}
