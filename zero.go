package sluice

import (
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/meta"
)

// In-place zeroing on the device, for the write checks (a gap past EOF),
// truncate and fallocate: zeroEOFTail (the bytes of the EOF block past
// EOF) and zeroBlockRange (part of one written block). It calls down into
// invalidation and the read-before-write rule.

// zeroEOFTail zeroes, on the device, the bytes of the EOF block past EOF
// size, so that extending the file can never expose stale bytes there
// (left, for example, by a crash between an extending write and its size
// update).
//
// Preconditions: in.io is held exclusive.
func (in *inode) zeroEOFTail(size int64) error {
	bs := in.fs.blockSize
	if size%bs == 0 {
		return nil
	}
	blk := size / bs
	if err := in.invalidateRange(blk*bs, (blk+1)*bs); err != nil {
		return err
	}
	wrote, err := in.zeroBlockRange(uint64(blk), size%bs, bs)
	if err != nil || !wrote {
		if err == nil {
			in.eofTailClean.Store(true)
		}
		return err
	}
	in.eofTailClean.Store(true)
	// The zeros must be durable before the size that exposes them can be:
	// otherwise a crash could keep the new size and the old bytes. If the
	// block was shared, the zeros went to a copy whose remap persists only
	// at a sync point, and the record still names the shared block and
	// its old bytes: the remap must be durable too
	// (TestTargetedStaleTailInSharedEOFBlock).
	in.mu.Lock()
	e, ok := in.ext.At(uint64(blk))
	remapped := ok && e.Remapped
	in.mu.Unlock()
	if remapped {
		return in.fs.group.sync()
	}
	return in.fs.flushDevice()
}

// checkEOFTail makes sure the bytes of the EOF block past EOF size are
// zeros on the device before a write at EOF extends the file over them.
// Only a crash leaves them otherwise (an extending write whose data landed
// and whose size did not), and a size made durable over them before the
// extending write's data (a buffered write, not yet written back, under a
// size another transaction of the inode persists) would show them. So the
// first such write of an inode in a mount reads the EOF block and, if the
// tail is not zeros, zeroes it durably (zeroEOFTail); in.eofTailClean
// remembers it (a file created in this mount starts with it), and it
// stays true while the file is extended by writes (which leave zeros past
// their end) or by truncate and fallocate (which zero the tail first and
// flush); clones and exchanges, which bring another file's EOF block,
// clear it.
//
// Preconditions: in.io is held exclusive and direct I/O is drained.
func (in *inode) checkEOFTail(size int64) error {
	fs := in.fs
	bs := fs.blockSize
	blk := uint64(size / bs)
	if err := in.writebackRange(int64(blk)*bs, int64(blk+1)*bs, false); err != nil {
		return err
	}
	s, err := in.blockMapping(blk)
	if err != nil {
		return err
	}
	if !s.Hole && s.State == meta.Written {
		buf := device.AlignedBuf(int(bs))
		if err := in.readVerified(buf, s.DevBlock, int64(blk)*bs); err != nil {
			return err
		}
		for _, b := range buf[size%bs:] {
			if b != 0 {
				fs.counters.EOFTailsZeroed.Add(1)
				if err := in.zeroEOFTail(size); err != nil {
					return err
				}
				break
			}
		}
	}
	in.eofTailClean.Store(true)
	return nil
}

// eofTailKnownClean reports whether the EOF block has no tail past EOF
// (EOF is block-aligned) or checkEOFTail found it zeros: then an append
// need not check it.
func (in *inode) eofTailKnownClean() bool {
	return in.eofTailClean.Load() || in.size()%in.fs.blockSize == 0
}

// zeroBlockRange zeroes bytes [from, to) of file block blk on the device
// if the block is written (holes and unwritten blocks read as zeros
// already), by read-modify-write of the I/O units concerned where the range
// covers them only in part (readBeforeWrite's rbwZeroPartUnit).
//
// Preconditions: in.io is held exclusive, and the block has no cached
// pages.
func (in *inode) zeroBlockRange(blk uint64, from, to int64) (wrote bool, err error) {
	fs := in.fs
	if fs.sums != nil && from < to {
		return in.rewriteBlock(blk, func(b []byte) { clear(b[from:to]) })
	}
	if from < to {
		if err := in.unshareLocked(blk, 1); err != nil {
			return false, err
		}
	}
	s, err := in.blockMapping(blk)
	if err != nil {
		return false, err
	}
	if s.Hole || s.State != meta.Written || from >= to {
		return false, nil
	}
	u := fs.ioUnit
	lo, hi := roundDown(from, u), roundUp(to, u)
	buf := device.AlignedBuf(int(hi - lo))
	dev := int64(s.DevBlock)*fs.blockSize + lo
	if why := readBeforeWrite(fs.policy, rbwWrite{kind: rbwZeroing, uptodate: lo == from && hi == to}); why.read() {
		fs.countRBW(why)
		if err := device.ReadAt(fs.dev, buf, dev); err != nil {
			return false, eio(err)
		}
	}
	clear(buf[from-lo : to-lo])
	return true, eio(device.WriteAt(fs.dev, buf, dev))
}

// rewriteBlock changes file block blk out of place, for a checksummed
// volume: if it is written, its bytes are read (verified), modify changes
// them, and they go to a staging block, remapped as a copy-on-write is
// (persisted at the next sync point); a hole or an unwritten block is
// left alone (it reads as zeros). It reports whether it wrote.
//
// Preconditions: in.io is held exclusive, direct I/O is drained, and the
// block has no cached pages.
func (in *inode) rewriteBlock(blk uint64, modify func([]byte)) (bool, error) {
	fs := in.fs
	bs := fs.blockSize
	s, err := in.blockMapping(blk)
	if err != nil {
		return false, err
	}
	if s.Hole || s.State != meta.Written {
		return false, nil
	}
	buf := device.AlignedBuf(int(bs))
	if err := in.readVerified(buf, s.DevBlock, int64(blk)*bs); err != nil {
		return false, err
	}
	modify(buf)
	stage, err := fs.takeStaging(1, s.DevBlock)
	if err != nil {
		return false, err
	}
	b := newBatch(fs)
	b.add(device.OpWrite, buf, int64(stage[0].Start)*bs)
	if err := b.run(); err != nil {
		fs.cow.put(stage)
		return false, eio(err)
	}
	fs.counters.SumRewrites.Add(1)
	return true, in.convertWritten(nil, []cowRange{{fb: blk, n: 1, dev: stage[0].Start}}, 0, false)
}
