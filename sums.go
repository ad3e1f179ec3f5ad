package sluice

import (
	"fmt"
	"log"

	"github.com/sluicefs/sluice/checksum"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/meta"
)

// Data checksums (sluice mkfs --data-checksums, meta.FeatureDataChecksums):
// the CRC-32C of every file block, kept by package checksum, set when a
// block is written (ioBatch.add) and verified whenever one is read from the
// device (ioBatch's reads, page reads, the copies a write makes). A
// mismatch fails the read with EIO, counts in SumMismatches, is logged
// once per block, and never leaves a page in the cache.
//
// A checksum and the data it covers become durable together because a
// block is written at most once between its allocation and its release:
// every write of a block that holds data goes to new blocks (the
// copy-on-write route, as an untorn write: atomic.go), so no record can
// ever name a block whose bytes differ from its recorded checksum. Writes
// of parts of blocks read the rest first (verified), and write whole
// blocks. What it costs: every overwrite allocates, and its remap is
// persisted at the next sync point (see BenchmarkDataChecksums).
//
// Restrictions: blocks of at most 4 KiB, so that a page holds whole blocks
// and every read from the device covers the blocks it verifies; parallel
// appends are off (appends take the exclusive route).

// loadSums loads the checksum table of a volume made with data checksums.
func (fs *FS) loadSums() error {
	if fs.vol.Super.Features&meta.FeatureDataChecksums == 0 {
		return nil
	}
	if fs.blockSize > 4096 {
		return fmt.Errorf("data checksums need blocks of at most 4 KiB (a page must hold whole blocks); this volume's are %d B", fs.blockSize)
	}
	fs.sums = checksum.New(fs.blockSize)
	if err := fs.sums.Load(fs.kv); err != nil {
		return fmt.Errorf("loading data checksums: %w", err)
	}
	return nil
}

// DataChecksums reports whether the volume checksums file data.
func (fs *FS) DataChecksums() bool { return fs.sums != nil }

// sumCheck is a device read whose blocks are verified once it completes:
// buf holds whole blocks read from device block dev, file offset fileOff of
// inode in; if out is set, the caller wanted out, which is copied from
// buf[from:] once buf verified.
type sumCheck struct {
	in      *inode
	fileOff int64
	dev     uint64
	buf     []byte
	out     []byte
	from    int64
}

// verifySums checks the whole blocks of buf, read from device block dev
// (file offset fileOff of in), and returns EIO on a mismatch (logged once
// per block) unless Options.NoVerifyDataChecksums.
func (fs *FS) verifySums(in *inode, fileOff int64, dev uint64, buf []byte) error {
	if fs.sums == nil {
		return nil
	}
	fs.counters.SumVerifiedBlocks.Add(int64(len(buf)) / fs.blockSize)
	bad, err := fs.sums.Verify(dev, buf)
	if err == nil {
		return nil
	}
	fs.counters.SumMismatches.Add(1)
	off := fileOff + int64(bad-dev)*fs.blockSize
	var ino meta.Ino
	if in != nil {
		ino = in.ino
	}
	if _, seen := fs.sumReported.LoadOrStore(bad, true); !seen {
		fs.logf("sluice: inode %d, file offset %d, device block %d: %v", ino, off, bad, err)
	}
	if fs.opts.NoVerifyDataChecksums {
		return nil
	}
	return eio(fmt.Errorf("inode %d, file offset %d: %w", ino, off, err))
}

// logf logs a problem the caller cannot be told about in full.
func (fs *FS) logf(format string, args ...any) {
	if fs.opts.Logf != nil {
		fs.opts.Logf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// setSums records the checksums of a data write of buf at device offset
// off, before it is submitted. Every data write is of whole blocks when
// the volume has checksums (the write paths see to it); one that is not is
// counted in SumPartialWrites, which the tests keep at zero.
func (fs *FS) setSums(buf []byte, off int64) {
	bs := fs.blockSize
	if off%bs != 0 || int64(len(buf))%bs != 0 {
		fs.counters.SumPartialWrites.Add(1)
		return
	}
	if fs.sums.Set(uint64(off/bs), buf) > sumFlushChunks && fs.sumFlushing.CompareAndSwap(false, true) {
		// Writes that commit nothing (into preallocated blocks, whose
		// conversions wait for the sync point) would otherwise pile
		// their checksums up for one transaction, past what etcd takes.
		fs.sumFlush.Add(1)
		go func() {
			defer fs.sumFlush.Done()
			defer fs.sumFlushing.Store(false)
			_ = fs.transact(func(*txn) error { return nil }) // a failure shuts down; the next write reports it
		}()
	}
}

// sumFlushChunks is how many checksum records may wait for a transaction
// before one is committed for them alone (256 KiB of records).
const sumFlushChunks = 1024

// readVerified reads whole blocks from device block dev into buf and
// verifies them (the copies a write makes: unshare, rewrite).
func (in *inode) readVerified(buf []byte, dev uint64, fileOff int64) error {
	fs := in.fs
	if err := device.ReadAt(fs.dev, buf, int64(dev)*fs.blockSize); err != nil {
		return eio(err)
	}
	return fs.verifySums(in, fileOff, dev, buf)
}

// readBlockInto reads the file block at file offset pos into buf (one
// block): zeros for a hole or an unwritten block, else the device's bytes,
// verified.
func (in *inode) readBlockInto(buf []byte, pos int64) error {
	s, err := in.blockMapping(uint64(pos / in.fs.blockSize))
	if err != nil {
		return err
	}
	if s.Hole || s.State != meta.Written {
		clear(buf)
		return nil
	}
	return in.readVerified(buf, s.DevBlock, pos)
}

// blockMapping returns the segment that maps file block blk, loading the
// extents if needed.
func (in *inode) blockMapping(blk uint64) (extmap.Segment, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil {
		return extmap.Segment{}, err
	}
	return m.Lookup(blk, 1, nil)[0], nil
}
