package fstest

import "syscall"

// reflinkCases are the POSIX cases of the reflink calls (FICLONE,
// FICLONERANGE, FIDEDUPERANGE, XFS_IOC_EXCHANGE_RANGE) and of the
// fallocate modes that move or unshare blocks (COLLAPSE_RANGE,
// INSERT_RANGE, UNSHARE_RANGE): the rows of the 6.18 XFS probe tables,
// then copy-on-write through the write paths. TestPOSIX runs them against
// the XFS oracle (4 KiB blocks); the file sizes are those of the tables
// (12388 B is three blocks and 100 B).
func reflinkCases() []posixCase {
	const (
		s   = 12388 // the probes' source: 3 blocks + 100 B
		big = 50000 // more than any file here: a read to EOF
	)
	// srcDst makes s (srcSize bytes of pattern 1) and d (dstSize bytes of
	// pattern 2) and opens d as h0 with dstFlags and s as h1 with
	// srcFlags.
	srcDst := func(srcSize, dstSize int64, dstFlags, srcFlags int) []Op {
		return seq(file("s", srcSize, 1), file("d", dstSize, 2), openOp(0, "d", dstFlags), openOp(1, "s", srcFlags))
	}
	cl := func(srcSize, dstSize int64) []Op { return srcDst(srcSize, dstSize, rdwr, rdonly) }
	// look reads both files back through the handles used.
	look := seq(fstatOp(0), preadOp(0, 0, big), fstatOp(1), preadOp(1, 0, big))
	// dd makes s (pattern 1) and d (dstSize bytes of pattern dstSeed)
	// and opens s as h0 and d as h1, both O_RDONLY.
	dd := func(dstSize int64, dstSeed byte) []Op {
		return seq(file("s", s, 1), file("d", dstSize, dstSeed), openOp(0, "s", rdonly), openOp(1, "d", rdonly))
	}
	// shared makes s (pattern 1), clones it into d (FICLONE) and leaves d
	// open as h0 (O_RDWR) and s as h1 (O_RDONLY).
	shared := func(srcSize int64) []Op {
		return seq(file("s", srcSize, 1), openOp(0, "d", rdwr|creat), openOp(1, "s", rdonly), cloneOp(0, 1))
	}
	// cow writes into d (h0) and reads s (h1): s must not change.
	cow := seq(pwriteOp(0, 100, 5000, 3), preadOp(0, 0, big), preadOp(1, 0, big))
	// ab makes f1 (size1 bytes of pattern 1, "A") and f2 (size2 bytes of
	// pattern 2, "B"), opens f1 as h0 and f2 as h1, O_RDWR.
	ab := func(size1, size2 int64) []Op {
		return seq(file("f1", size1, 1), file("f2", size2, 2), openOp(0, "f1", rdwr), openOp(1, "f2", rdwr))
	}
	xlook := seq(fstatOp(0), preadOp(0, 0, big), fstatOp(1), preadOp(1, 0, big))
	// f makes f of n bytes (pattern 1) and opens it as h0, O_RDWR.
	f := func(n int64) []Op { return seq(file("f", n, 1), openOp(0, "f", rdwr)) }
	flook := seq(fstatOp(0), preadOp(0, 0, big))
	const maxOff = 1<<63 - 1

	return []posixCase{
		// FICLONE.
		{name: "ok/FICLONE into empty file", setup: cl(s, 0), call: cloneOp(0, 1), after: seq(look, cow)},
		{name: "EINVAL/FICLONE partial EOF block into larger file", setup: cl(s, 20480), call: cloneOp(0, 1), want: syscall.EINVAL, after: look},
		{name: "ok/FICLONE onto file of the same size", setup: cl(s, s), call: cloneOp(0, 1), after: look},
		{name: "ok/FICLONE grows shorter file", setup: cl(s, 12000), call: cloneOp(0, 1), after: look},
		{name: "ok/FICLONE whole blocks into larger file keeps its tail", setup: cl(8192, 20480), call: cloneOp(0, 1), after: seq(look, cow)},
		{name: "ok/FICLONE of empty file changes nothing", setup: cl(0, 8192), call: cloneOp(0, 1), after: look},
		{name: "EBADF/FICLONE from O_WRONLY source", setup: srcDst(s, 0, rdwr, wronly), call: cloneOp(0, 1), want: syscall.EBADF},
		{name: "EBADF/FICLONE into O_RDONLY file", setup: srcDst(s, 0, rdonly, rdonly), call: cloneOp(0, 1), want: syscall.EBADF},
		{name: "EBADF/FICLONE into O_APPEND file", setup: srcDst(s, 0, rdwr|appnd, rdonly), call: cloneOp(0, 1), want: syscall.EBADF},
		{name: "ok/FICLONE into O_WRONLY file", setup: srcDst(s, 0, wronly, rdonly), call: cloneOp(0, 1), after: seq(fstatOp(0))},
		{name: "EINVAL/FICLONE file onto itself", setup: f(s), call: cloneOp(0, 0), want: syscall.EINVAL},
		{name: "ok/FICLONE empty file onto itself", setup: f(0), call: cloneOp(0, 0)},
		{name: "EISDIR/FICLONE from dir", setup: seq(mkdirOp("e"), file("d", 0, 1), openOp(0, "d", rdwr), openOp(1, "e", rdonly)),
			call: cloneOp(0, 1), want: syscall.EISDIR},
		{name: "EISDIR/FICLONE into dir handle", setup: seq(mkdirOp("e"), file("s", s, 1), openOp(0, "e", rdonly), openOp(1, "s", rdonly)),
			call: cloneOp(0, 1), want: syscall.EISDIR},
		{name: "EBADF/FICLONE from closed file", setup: seq(cl(s, 0), closeOp(1)), call: cloneOp(0, 1), want: syscall.EBADF},
		{name: "EBADF/FICLONE from slot never opened", setup: cl(s, 0), call: cloneOp(0, 7), want: syscall.EBADF},
		{name: "EBADF/FICLONE into closed file", setup: seq(cl(s, 0), closeOp(0)), call: cloneOp(0, 1), want: syscall.EBADF},

		// FICLONERANGE: cloneRangeOp(dst, src, srcOff, len, dstOff).
		{name: "ok/FICLONERANGE one block into empty file", setup: cl(s, 0), call: cloneRangeOp(0, 1, 0, 4096, 0), after: look},
		{name: "ok/FICLONERANGE inside larger file", setup: cl(s, 20480), call: cloneRangeOp(0, 1, 0, 8192, 4096), after: seq(look, cow)},
		{name: "EINVAL/FICLONERANGE misaligned source offset", setup: cl(s, 0), call: cloneRangeOp(0, 1, 1, 4096, 0), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE misaligned destination offset", setup: cl(s, 0), call: cloneRangeOp(0, 1, 0, 4096, 1), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE length under a block", setup: cl(s, 0), call: cloneRangeOp(0, 1, 0, 100, 0), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE length a block and a byte", setup: cl(s, 0), call: cloneRangeOp(0, 1, 0, 4097, 0), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE misaligned length", setup: cl(s, 0), call: cloneRangeOp(0, 1, 0, 6000, 0), want: syscall.EINVAL, after: look},
		{name: "ok/FICLONERANGE EOF tail into empty file", setup: cl(s, 0), call: cloneRangeOp(0, 1, 8192, 4196, 0), after: look},
		{name: "EINVAL/FICLONERANGE EOF tail into middle of file", setup: cl(s, 20480), call: cloneRangeOp(0, 1, 8192, 4196, 0), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE EOF tail ending before destination EOF", setup: cl(s, 20480), call: cloneRangeOp(0, 1, 8192, 4196, 12288), want: syscall.EINVAL},
		{name: "ok/FICLONERANGE EOF tail past destination EOF", setup: cl(s, 20480), call: cloneRangeOp(0, 1, 8192, 4196, 16384), after: seq(look, cow)},
		{name: "ok/FICLONERANGE EOF tail to destination EOF", setup: cl(s, 20580), call: cloneRangeOp(0, 1, 8192, 4196, 16384), after: look},
		{name: "EINVAL/FICLONERANGE length past source EOF", setup: cl(s, 0), call: cloneRangeOp(0, 1, 8192, 8192, 0), want: syscall.EINVAL},
		{name: "ok/FICLONERANGE length 0 to source EOF", setup: cl(s, 0), call: cloneRangeOp(0, 1, 4096, 0, 0), after: look},
		{name: "ok/FICLONERANGE length 0 from last block", setup: cl(s, 0), call: cloneRangeOp(0, 1, 12288, 0, 0), after: look},
		{name: "ok/FICLONERANGE length 0 at source EOF does nothing", setup: cl(s, 8192), call: cloneRangeOp(0, 1, s, 0, 0), after: look},
		{name: "EINVAL/FICLONERANGE length 0 past source EOF", setup: cl(s, 0), call: cloneRangeOp(0, 1, 16384, 0, 0), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE at source EOF", setup: cl(s, 0), call: cloneRangeOp(0, 1, s, 4096, 0), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE past source EOF", setup: cl(s, 0), call: cloneRangeOp(0, 1, 16384, 4096, 0), want: syscall.EINVAL},
		{name: "ok/FICLONERANGE far past destination EOF leaves a hole", setup: cl(s, 4096), call: cloneRangeOp(0, 1, 0, 4096, 40960), after: look},
		{name: "ok/FICLONERANGE past unaligned destination EOF zeroes the gap", setup: cl(s, 5000), call: cloneRangeOp(0, 1, 0, 4096, 8192), after: look},
		{name: "EINVAL/FICLONERANGE overlap within one file", setup: f(16384), call: cloneRangeOp(0, 0, 0, 8192, 4096), want: syscall.EINVAL},
		{name: "ok/FICLONERANGE within one file", setup: f(16384), call: cloneRangeOp(0, 0, 0, 4096, 8192),
			after: seq(flook, pwriteOp(0, 8200, 100, 3), pwriteOp(0, 10, 10, 4), preadOp(0, 0, big))},
		{name: "ok/FICLONERANGE within one file past EOF", setup: f(16384), call: cloneRangeOp(0, 0, 0, 4096, 16384), after: flook},
		{name: "EINVAL/FICLONERANGE EOF tail into middle of same file", setup: f(s), call: cloneRangeOp(0, 0, 8192, 4196, 0), want: syscall.EINVAL},
		{name: "ok/FICLONERANGE within one file through two handles", setup: seq(f(16384), openOp(1, "f", rdonly)),
			call: cloneRangeOp(0, 1, 12288, 4096, 0), after: seq(preadOp(1, 0, big))},
		{name: "EINVAL/FICLONERANGE negative source offset", setup: cl(s, 0), call: cloneRangeOp(0, 1, -4096, 4096, 0), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE negative destination offset", setup: cl(s, 0), call: cloneRangeOp(0, 1, 0, 4096, -4096), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE negative length", setup: cl(s, 0), call: cloneRangeOp(0, 1, 0, -1, 0), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE huge length", setup: cl(s, 0), call: cloneRangeOp(0, 1, 0, maxOff-4095, 0), want: syscall.EINVAL},
		{name: "EINVAL/FICLONERANGE overflowing source range", setup: cl(s, 0), call: cloneRangeOp(0, 1, 1<<62, 3<<61, 0), want: syscall.EINVAL},
		{name: "ok/FICLONERANGE to just below the largest size", setup: cl(s, 4096), call: cloneRangeOp(0, 1, 0, 4096, maxOff-8191),
			after: seq(fstatOp(0), preadOp(0, maxOff-8191, 4106), ftruncOp(0, 4096))},
		{name: "EINVAL/FICLONERANGE to the largest size", setup: cl(s, 4096), call: cloneRangeOp(0, 1, 0, 4096, maxOff-4095), want: syscall.EINVAL},
		{name: "EBADF/FICLONERANGE misaligned from O_WRONLY source", setup: srcDst(s, 0, rdwr, wronly), call: cloneRangeOp(0, 1, 100, 4096, 0), want: syscall.EBADF},
		{name: "EBADF/FICLONERANGE negative offset into O_RDONLY file", setup: srcDst(s, 0, rdonly, rdonly), call: cloneRangeOp(0, 1, -4096, 4096, 0), want: syscall.EBADF},

		// Copy-on-write through the write paths.
		{name: "ok/clone then buffered writes on both sides", setup: shared(s), call: pwriteOp(0, 4000, 200, 3),
			after: seq(openOp(2, "s", rdwr), pwriteOp(2, 8000, 300, 4), preadOp(0, 0, big), preadOp(1, 0, big))},
		{name: "ok/clone then O_DIRECT writes into the source", setup: seq(shared(16384), openOp(2, "s", rdwr|direct)),
			call: pwriteOp(2, 4096, 4096, 3), after: seq(pwriteOp(2, 8704, 1024, 4), preadOp(0, 0, big), preadOp(2, 0, 16384))},
		{name: "ok/clone then O_DIRECT sub-block write into the clone", setup: seq(shared(16384), openOp(2, "d", rdwr|direct)),
			call: pwriteOp(2, 512, 512, 3), after: seq(preadOp(0, 0, big), preadOp(1, 0, big))},
		{name: "ok/clone then truncate the source down and up", setup: seq(shared(s), openOp(2, "s", rdwr)),
			call: ftruncOp(2, 5000), after: seq(ftruncOp(2, 16384), preadOp(0, 0, big), preadOp(2, 0, big))},
		{name: "ok/clone then punch and zero the clone", setup: shared(16384), call: fallocOp(0, punchHole|keepSize, 1000, 6000),
			after: seq(fallocOp(0, zeroRange, 9000, 100), preadOp(0, 0, big), preadOp(1, 0, big))},
		{name: "ok/clone over dirty pages of the destination", setup: seq(file("s", 16384, 1), openOp(0, "d", rdwr|creat), openOp(1, "s", rdonly),
			pwriteOp(0, 0, 16384, 2)), call: cloneRangeOp(0, 1, 4096, 4096, 4096), after: look},
		{name: "ok/clone of dirty pages of the source", setup: seq(file("s", 16384, 1), openOp(0, "d", rdwr|creat), openOp(1, "s", rdwr),
			pwriteOp(1, 100, 8000, 2)), call: cloneRangeOp(0, 1, 0, 8192, 0), after: look},
		{name: "ok/clone read back through cached pages", setup: seq(cl(16384, 16384), preadOp(0, 0, 16384)),
			call: cloneRangeOp(0, 1, 4096, 8192, 0), after: look},
		{name: "ok/clone of a hole and of fallocated blocks", setup: seq(openOp(1, "s", rdwr|creat), ftruncOp(1, 16384), fallocOp(1, keepSize, 8192, 4096),
			pwriteOp(1, 12288, 100, 1), openOp(0, "d", rdwr|creat), pwriteOp(0, 0, 16384, 2)),
			call: cloneRangeOp(0, 1, 0, 0, 0), after: seq(look, pwriteOp(0, 4000, 200, 3), preadOp(0, 0, big), preadOp(1, 0, big))},
		{name: "ok/clone within one file of a shared partial EOF block, then punch the copy",
			setup: seq(file("s", 100, 1), openOp(0, "a", rdwr|creat), openOp(1, "s", rdonly), cloneOp(0, 1), cloneRangeOp(0, 0, 0, 0, 4096)),
			call:  fallocOp(0, punchHole|keepSize, 4096, 4096), after: seq(preadOp(0, 0, big), preadOp(1, 0, big))},
		{name: "ok/clone of clone", setup: seq(shared(s), openOp(2, "e", rdwr|creat)), call: cloneOp(2, 0),
			after: seq(pwriteOp(0, 0, 10, 3), preadOp(2, 0, big), preadOp(1, 0, big), unlinkOp("s"), preadOp(2, 0, big))},

		// FIDEDUPERANGE: dedupeOp(src, srcOff, len, dst, dstOff).
		{name: "ok/FIDEDUPERANGE identical ranges", setup: dd(s, 1), call: dedupeOp(0, 0, 8192, 1, 0),
			after: seq(openOp(2, "d", rdwr), pwriteOp(2, 0, 100, 3), preadOp(0, 0, big), preadOp(1, 0, big))},
		{name: "EBADE/FIDEDUPERANGE different bytes", setup: dd(s, 2), call: dedupeOp(0, 0, 8192, 1, 0), want: syscall.EBADE},
		{name: "ok/FIDEDUPERANGE misaligned length counts all", setup: dd(s, 1), call: dedupeOp(0, 0, 6000, 1, 0)},
		{name: "ok/FIDEDUPERANGE compares whole blocks only", setup: seq(dd(s, 1), openOp(2, "d", rdwr), pwriteOp(2, 5000, 100, 9)),
			call: dedupeOp(0, 0, 6000, 1, 0), after: seq(preadOp(1, 0, big))},
		{name: "ok/FIDEDUPERANGE under a block that differs", setup: dd(s, 2), call: dedupeOp(0, 0, 100, 1, 0)},
		{name: "ok/FIDEDUPERANGE EOF blocks", setup: dd(s, 1), call: dedupeOp(0, 8192, 4196, 1, 8192)},
		{name: "ok/FIDEDUPERANGE EOF tail into longer file", setup: dd(20480, 1), call: dedupeOp(0, 8192, 4196, 1, 8192)},
		{name: "ok/FIDEDUPERANGE to both EOFs", setup: dd(s, 1), call: dedupeOp(0, 4096, 8292, 1, 4096)},
		{name: "ok/FIDEDUPERANGE length 0", setup: dd(s, 1), call: dedupeOp(0, 0, 0, 1, 0)},
		{name: "EINVAL/FIDEDUPERANGE past source EOF", setup: dd(s, 1), call: dedupeOp(0, 8192, 8192, 1, 0), want: syscall.EINVAL},
		{name: "EINVAL/FIDEDUPERANGE past destination EOF", setup: dd(4096, 1), call: dedupeOp(0, 0, 8192, 1, 0), want: syscall.EINVAL},
		{name: "EINVAL/FIDEDUPERANGE destination offset past EOF", setup: dd(s, 1), call: dedupeOp(0, 0, 4096, 1, 16384), want: syscall.EINVAL},
		{name: "EINVAL/FIDEDUPERANGE misaligned offsets", setup: dd(s, 1), call: dedupeOp(0, 100, 4096, 1, 100), want: syscall.EINVAL},
		{name: "ok/FIDEDUPERANGE into O_RDWR destination", setup: seq(dd(s, 1), openOp(1, "d", rdwr)), call: dedupeOp(0, 0, 8192, 1, 0)},
		{name: "EINVAL/FIDEDUPERANGE from O_WRONLY source", setup: seq(dd(s, 1), openOp(0, "s", wronly)), call: dedupeOp(0, 0, 8192, 1, 0), want: syscall.EINVAL},
		{name: "EINVAL/FIDEDUPERANGE negative source offset", setup: dd(s, 1), call: dedupeOp(0, -4096, 4096, 1, 0), want: syscall.EINVAL},
		{name: "EINVAL/FIDEDUPERANGE negative destination offset", setup: dd(s, 1), call: dedupeOp(0, 0, 4096, 1, -4096), want: syscall.EINVAL},
		{name: "EISDIR/FIDEDUPERANGE from dir", setup: seq(dd(s, 1), mkdirOp("e"), openOp(0, "e", rdonly)), call: dedupeOp(0, 0, 4096, 1, 0), want: syscall.EISDIR},
		{name: "EISDIR/FIDEDUPERANGE of no bytes from dir", setup: seq(dd(s, 1), mkdirOp("e"), openOp(0, "e", rdonly)), call: dedupeOp(0, 0, 0, 1, 0), want: syscall.EISDIR},
		{name: "EISDIR/FIDEDUPERANGE into dir", setup: seq(dd(s, 1), mkdirOp("e"), openOp(1, "e", rdonly)), call: dedupeOp(0, 0, 4096, 1, 0), want: syscall.EISDIR},
		{name: "EISDIR/FIDEDUPERANGE of no bytes into dir", setup: seq(dd(s, 1), mkdirOp("e"), openOp(1, "e", rdonly)), call: dedupeOp(0, 0, 0, 1, 0), want: syscall.EISDIR},
		{name: "EBADF/FIDEDUPERANGE into closed file", setup: seq(dd(s, 1), closeOp(1)), call: dedupeOp(0, 0, 4096, 1, 0), want: syscall.EBADF},
		{name: "EBADF/FIDEDUPERANGE of no bytes into closed file", setup: seq(dd(s, 1), closeOp(1)), call: dedupeOp(0, 0, 0, 1, 0), want: syscall.EBADF},
		{name: "EINVAL/FIDEDUPERANGE of no bytes to negative offset", setup: dd(s, 1), call: dedupeOp(0, 0, 0, 1, -4096), want: syscall.EINVAL},
		{name: "EBADF/FIDEDUPERANGE into slot never opened", setup: dd(s, 1), call: dedupeOp(0, 0, 4096, 7, 0), want: syscall.EBADF},
		{name: "EBADF/FIDEDUPERANGE from closed file", setup: seq(dd(s, 1), closeOp(0)), call: dedupeOp(0, 0, 4096, 1, 0), want: syscall.EBADF},
		{name: "EINVAL/FIDEDUPERANGE overlap within one file", setup: seq(f(16384)), call: dedupeOp(0, 0, 8192, 0, 4096), want: syscall.EINVAL},
		{name: "ok/FIDEDUPERANGE identical blocks of one file", setup: seq(openOp(0, "f", rdwr|creat), pwriteOp(0, 0, 4096, 1), pwriteOp(0, 4096, 4096, 2),
			pwriteOp(0, 8192, 4096, 1), fsyncOp(0)), call: dedupeOp(0, 0, 4096, 0, 8192), after: seq(pwriteOp(0, 8192, 10, 3), preadOp(0, 0, big))},
		{name: "ok/FIDEDUPERANGE of holes", setup: seq(openOp(0, "s", rdwr|creat), ftruncOp(0, 16384), openOp(1, "d", rdwr|creat), ftruncOp(1, 16384)),
			call: dedupeOp(0, 0, 8192, 1, 4096)},
		{name: "ok/FIDEDUPERANGE of dirty pages", setup: seq(openOp(0, "s", rdwr|creat), pwriteOp(0, 0, 8192, 1), openOp(1, "d", rdwr|creat), pwriteOp(1, 0, 8192, 1)),
			call: dedupeOp(0, 0, 8192, 1, 0), after: seq(pwriteOp(1, 4096, 10, 2), preadOp(0, 0, big), preadOp(1, 0, big))},

		// FALLOC_FL_UNSHARE_RANGE on d, a clone of s.
		{name: "ok/UNSHARE_RANGE", setup: shared(s), call: fallocOp(0, unshareRange, 0, 8192), after: seq(look, cow)},
		{name: "ok/UNSHARE_RANGE KEEP_SIZE", setup: shared(s), call: fallocOp(0, unshareRange|keepSize, 0, 8192), after: seq(look, cow)},
		{name: "ok/UNSHARE_RANGE of a few bytes", setup: shared(s), call: fallocOp(0, unshareRange, 100, 10), after: seq(look, cow)},
		{name: "ok/UNSHARE_RANGE past EOF extends", setup: shared(s), call: fallocOp(0, unshareRange, 0, 40960), after: seq(look, cow)},
		{name: "ok/UNSHARE_RANGE KEEP_SIZE past EOF", setup: shared(s), call: fallocOp(0, unshareRange|keepSize, 0, 40960), after: seq(look, cow)},
		{name: "ok/UNSHARE_RANGE beyond EOF", setup: shared(s), call: fallocOp(0, unshareRange, 40960, 4096), after: seq(look, cow)},
		{name: "ok/UNSHARE_RANGE of a file that shares nothing", setup: f(s), call: fallocOp(0, unshareRange, 0, 8192), after: flook},
		{name: "EOPNOTSUPP/UNSHARE_RANGE with PUNCH_HOLE", setup: shared(s), call: fallocOp(0, unshareRange|punchHole, 0, 4096), want: syscall.EOPNOTSUPP},
		{name: "EOPNOTSUPP/UNSHARE_RANGE with PUNCH_HOLE and KEEP_SIZE", setup: shared(s), call: fallocOp(0, unshareRange|punchHole|keepSize, 0, 4096), want: syscall.EOPNOTSUPP},
		{name: "EOPNOTSUPP/UNSHARE_RANGE with ZERO_RANGE", setup: shared(s), call: fallocOp(0, unshareRange|zeroRange, 0, 4096), want: syscall.EOPNOTSUPP},
		{name: "EOPNOTSUPP/fallocate WRITE_ZEROES on XFS", setup: seq(shared(s)), call: fallocOp(0, 0x80, 0, 4096), want: syscall.EOPNOTSUPP},
		{name: "EOPNOTSUPP/fallocate WRITE_ZEROES with KEEP_SIZE", setup: seq(shared(s)), call: fallocOp(0, 0x81, 0, 4096), want: syscall.EOPNOTSUPP},
		{name: "EBADF/fallocate WRITE_ZEROES on O_RDONLY", setup: seq(shared(s), openOp(2, "d", rdonly)), call: fallocOp(2, 0x80, 0, 4096), want: syscall.EBADF},
		{name: "EOPNOTSUPP/fallocate NO_HIDE_STALE", setup: seq(shared(s)), call: fallocOp(0, 0x04, 0, 4096), want: syscall.EOPNOTSUPP},
		{name: "EINVAL/UNSHARE_RANGE length 0", setup: shared(s), call: fallocOp(0, unshareRange, 0, 0), want: syscall.EINVAL},
		{name: "EINVAL/UNSHARE_RANGE negative offset", setup: shared(s), call: fallocOp(0, unshareRange, -1, 4096), want: syscall.EINVAL},
		{name: "EFBIG/UNSHARE_RANGE overflowing range", setup: shared(s), call: fallocOp(0, unshareRange, 1<<62, maxOff), want: syscall.EFBIG},
		{name: "EBADF/UNSHARE_RANGE on O_RDONLY", setup: seq(shared(s), openOp(2, "d", rdonly)), call: fallocOp(2, unshareRange, 0, 4096), want: syscall.EBADF},
		{name: "EOPNOTSUPP/UNSHARE_RANGE with PUNCH_HOLE on O_RDONLY", setup: seq(shared(s), openOp(2, "d", rdonly)),
			call: fallocOp(2, unshareRange|punchHole, 0, 4096), want: syscall.EOPNOTSUPP},
		{name: "EINVAL/UNSHARE_RANGE with PUNCH_HOLE length 0", setup: shared(s), call: fallocOp(0, unshareRange|punchHole, 0, 0), want: syscall.EINVAL},
		{name: "ok/punch a shared block", setup: shared(s), call: fallocOp(0, punchHole|keepSize, 4096, 4096), after: seq(look, cow)},

		// FALLOC_FL_COLLAPSE_RANGE and FALLOC_FL_INSERT_RANGE.
		{name: "ok/COLLAPSE_RANGE", setup: f(16384), call: fallocOp(0, collapseRange, 4096, 4096), after: flook},
		{name: "ok/COLLAPSE_RANGE at 0", setup: f(16384), call: fallocOp(0, collapseRange, 0, 8192), after: flook},
		{name: "ok/COLLAPSE_RANGE of a file with a partial last block", setup: f(s), call: fallocOp(0, collapseRange, 0, 4096), after: flook},
		{name: "EINVAL/COLLAPSE_RANGE misaligned offset", setup: f(16384), call: fallocOp(0, collapseRange, 100, 4096), want: syscall.EINVAL},
		{name: "EINVAL/COLLAPSE_RANGE misaligned length", setup: f(16384), call: fallocOp(0, collapseRange, 4096, 100), want: syscall.EINVAL},
		{name: "EINVAL/COLLAPSE_RANGE to EOF", setup: f(16384), call: fallocOp(0, collapseRange, 8192, 8192), want: syscall.EINVAL},
		{name: "EINVAL/COLLAPSE_RANGE past EOF", setup: f(16384), call: fallocOp(0, collapseRange, 12288, 8192), want: syscall.EINVAL},
		{name: "EOPNOTSUPP/COLLAPSE_RANGE with KEEP_SIZE", setup: f(16384), call: fallocOp(0, collapseRange|keepSize, 4096, 4096), want: syscall.EOPNOTSUPP},
		{name: "EBADF/COLLAPSE_RANGE on O_RDONLY", setup: seq(f(16384), openOp(1, "f", rdonly)), call: fallocOp(1, collapseRange, 4096, 4096), want: syscall.EBADF},
		{name: "ok/COLLAPSE_RANGE of dirty pages", setup: seq(openOp(0, "f", rdwr|creat), pwriteOp(0, 0, 20000, 1)),
			call: fallocOp(0, collapseRange, 4096, 8192), after: flook},
		{name: "ok/COLLAPSE_RANGE of shared blocks", setup: shared(16384), call: fallocOp(0, collapseRange, 4096, 4096), after: seq(look, cow)},
		{name: "ok/COLLAPSE_RANGE then O_DIRECT read", setup: seq(f(20480), openOp(1, "f", rdonly|direct)),
			call: fallocOp(0, collapseRange, 4096, 4096), after: seq(preadOp(1, 0, 20480))},
		{name: "ok/INSERT_RANGE", setup: f(16384), call: fallocOp(0, insertRange, 4096, 4096), after: flook},
		{name: "ok/INSERT_RANGE at 0", setup: f(16384), call: fallocOp(0, insertRange, 0, 8192), after: flook},
		{name: "ok/INSERT_RANGE in a file with a partial last block", setup: f(s), call: fallocOp(0, insertRange, 8192, 4096),
			after: seq(flook, pwriteOp(0, 9000, 10, 3), preadOp(0, 0, big))},
		{name: "EINVAL/INSERT_RANGE at EOF", setup: f(16384), call: fallocOp(0, insertRange, 16384, 4096), want: syscall.EINVAL},
		{name: "EINVAL/INSERT_RANGE past EOF", setup: f(16384), call: fallocOp(0, insertRange, 20480, 4096), want: syscall.EINVAL},
		{name: "EINVAL/INSERT_RANGE misaligned", setup: f(16384), call: fallocOp(0, insertRange, 4096, 100), want: syscall.EINVAL},
		{name: "EOPNOTSUPP/INSERT_RANGE with KEEP_SIZE", setup: f(16384), call: fallocOp(0, insertRange|keepSize, 4096, 4096), want: syscall.EOPNOTSUPP},
		{name: "EFBIG/INSERT_RANGE past the largest size", setup: f(16384), call: fallocOp(0, insertRange, 0, maxOff-4095), want: syscall.EFBIG},
		{name: "ok/INSERT_RANGE into shared blocks", setup: shared(16384), call: fallocOp(0, insertRange, 4096, 4096), after: seq(look, cow)},
		{name: "ok/INSERT_RANGE of dirty pages", setup: seq(openOp(0, "f", rdwr|creat), pwriteOp(0, 0, 10000, 1)),
			call: fallocOp(0, insertRange, 4096, 4096), after: flook},

		// XFS_IOC_EXCHANGE_RANGE: exchangeOp(file2, file1, off1, off2,
		// len, flags), f1 "A" (h0) and f2 "B" (h1).
		{name: "ok/EXCHANGE_RANGE first blocks", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 0, 4096, 0), after: xlook},
		{name: "ok/EXCHANGE_RANGE at other offsets", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 4096, 4096, 0), after: xlook},
		{name: "EINVAL/EXCHANGE_RANGE misaligned offset", setup: ab(8192, 8192), call: exchangeOp(1, 0, 100, 0, 4096, 0), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE under a block", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 0, 100, 0), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE misaligned length", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 0, 6000, 0), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE past EOF", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 0, 12288, 0), want: syscall.EINVAL},
		{name: "ok/EXCHANGE_RANGE to both EOFs", setup: ab(5000, 5000), call: exchangeOp(1, 0, 0, 0, 5000, 0), after: xlook},
		{name: "EINVAL/EXCHANGE_RANGE partial block before file2 EOF", setup: ab(5000, 20000), call: exchangeOp(1, 0, 0, 0, 5000, 0), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE partial block before file1 EOF", setup: ab(20000, 5000), call: exchangeOp(1, 0, 0, 0, 5000, 0), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE EOF tail into middle", setup: ab(5000, 20000), call: exchangeOp(1, 0, 4096, 4096, 904, 0), want: syscall.EINVAL},
		{name: "ok/EXCHANGE_RANGE of nothing at EOF", setup: ab(8192, 8192), call: exchangeOp(1, 0, 8192, 8192, 0, 0), after: xlook},
		{name: "ok/EXCHANGE_RANGE of nothing", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 0, 0, 0)},
		{name: "EINVAL/EXCHANGE_RANGE offset past EOF", setup: ab(8192, 8192), call: exchangeOp(1, 0, 12288, 0, 0, 0), want: syscall.EINVAL},
		{name: "ok/EXCHANGE_RANGE TO_EOF swaps sizes", setup: ab(5000, 12000), call: exchangeOp(1, 0, 0, 0, 0, ExchangeToEOF), after: xlook},
		{name: "ok/EXCHANGE_RANGE TO_EOF ignores the length", setup: ab(5000, 12000), call: exchangeOp(1, 0, 0, 0, 123, ExchangeToEOF), after: xlook},
		{name: "ok/EXCHANGE_RANGE TO_EOF from a block", setup: ab(20000, 8192), call: exchangeOp(1, 0, 4096, 4096, 0, ExchangeToEOF), after: xlook},
		{name: "ok/EXCHANGE_RANGE TO_EOF at other offsets", setup: ab(20000, 8192), call: exchangeOp(1, 0, 0, 4096, 0, ExchangeToEOF), after: xlook},
		{name: "EINVAL/EXCHANGE_RANGE TO_EOF misaligned", setup: ab(8192, 8192), call: exchangeOp(1, 0, 100, 100, 0, ExchangeToEOF), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE TO_EOF negative offset", setup: ab(8192, 8192), call: exchangeOp(1, 0, -4096, 0, 0, ExchangeToEOF), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE TO_EOF past EOF", setup: ab(8192, 8192), call: exchangeOp(1, 0, 12288, 0, 0, ExchangeToEOF), want: syscall.EINVAL},
		{name: "ok/EXCHANGE_RANGE TO_EOF at both EOFs", setup: ab(8192, 8192), call: exchangeOp(1, 0, 8192, 8192, 0, ExchangeToEOF), after: xlook},
		{name: "ok/EXCHANGE_RANGE TO_EOF at both EOFs of different sizes", setup: ab(4096, 8192), call: exchangeOp(1, 0, 4096, 8192, 0, ExchangeToEOF),
			after: seq(xlook, ftruncOp(1, 12288), preadOp(1, 0, big))},
		{name: "ok/EXCHANGE_RANGE TO_EOF shrinking file2 below its offset then fsync",
			setup: seq(openOp(0, "f1", rdwr|creat), pwriteOp(0, 0, 4096, 1), openOp(1, "f2", rdwr|creat), pwriteOp(1, 0, 8192, 2)),
			call:  exchangeOp(1, 0, 0, 8192, 0, ExchangeToEOF), after: seq(fsyncOp(1), fsyncOp(0), xlook)},
		{name: "ok/EXCHANGE_RANGE DRY_RUN", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 0, 4096, ExchangeDryRun), after: xlook},
		{name: "ok/EXCHANGE_RANGE TO_EOF DRY_RUN keeps sizes", setup: ab(5000, 12000), call: exchangeOp(1, 0, 0, 0, 0, ExchangeToEOF|ExchangeDryRun), after: xlook},
		{name: "EINVAL/EXCHANGE_RANGE DRY_RUN under a block", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 0, 100, ExchangeDryRun), want: syscall.EINVAL},
		{name: "ok/EXCHANGE_RANGE DSYNC", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 0, 8192, ExchangeDsync), after: xlook},
		{name: "EINVAL/EXCHANGE_RANGE unknown flag", setup: ab(8192, 8192), call: exchangeOp(1, 0, 0, 0, 4096, 16), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE negative offset", setup: ab(8192, 8192), call: exchangeOp(1, 0, -4096, 0, 4096, 0), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE overflowing length", setup: ab(8192, 8192), call: exchangeOp(1, 0, 4096, 4096, maxOff, 0), want: syscall.EINVAL},
		{name: "EINVAL/EXCHANGE_RANGE overlap within one file", setup: f(16384), call: exchangeOp(0, 0, 0, 4096, 8192, 0), want: syscall.EINVAL},
		{name: "ok/EXCHANGE_RANGE within one file", setup: seq(openOp(0, "f", rdwr|creat), pwriteOp(0, 0, 8192, 1), pwriteOp(0, 8192, 8192, 2)),
			call: exchangeOp(0, 0, 0, 8192, 8192, 0), after: flook},
		{name: "EBADF/EXCHANGE_RANGE file1 O_RDONLY", setup: seq(ab(8192, 8192), openOp(0, "f1", rdonly)), call: exchangeOp(1, 0, 0, 0, 4096, 0), want: syscall.EBADF},
		{name: "EBADF/EXCHANGE_RANGE file1 O_WRONLY", setup: seq(ab(8192, 8192), openOp(0, "f1", wronly)), call: exchangeOp(1, 0, 0, 0, 4096, 0), want: syscall.EBADF},
		{name: "EBADF/EXCHANGE_RANGE file2 O_WRONLY", setup: seq(ab(8192, 8192), openOp(1, "f2", wronly)), call: exchangeOp(1, 0, 0, 0, 4096, 0), want: syscall.EBADF},
		{name: "EBADF/EXCHANGE_RANGE file2 O_APPEND", setup: seq(ab(8192, 8192), openOp(1, "f2", rdwr|appnd)), call: exchangeOp(1, 0, 0, 0, 4096, 0), want: syscall.EBADF},
		{name: "EBADF/EXCHANGE_RANGE O_RDONLY and misaligned", setup: seq(ab(8192, 8192), openOp(0, "f1", rdonly)), call: exchangeOp(1, 0, 100, 0, 4096, 0), want: syscall.EBADF},
		{name: "EBADF/EXCHANGE_RANGE O_RDONLY and negative", setup: seq(ab(8192, 8192), openOp(0, "f1", rdonly)), call: exchangeOp(1, 0, -4096, 0, 4096, 0), want: syscall.EBADF},
		{name: "EISDIR/EXCHANGE_RANGE file1 dir", setup: seq(ab(8192, 8192), mkdirOp("e"), openOp(0, "e", rdonly)), call: exchangeOp(1, 0, 0, 0, 4096, 0), want: syscall.EISDIR},
		{name: "EBADF/EXCHANGE_RANGE file1 closed", setup: seq(ab(8192, 8192), closeOp(0)), call: exchangeOp(1, 0, 0, 0, 4096, 0), want: syscall.EBADF},
		{name: "EBADF/EXCHANGE_RANGE file1 never opened", setup: ab(8192, 8192), call: exchangeOp(1, 7, 0, 0, 4096, 0), want: syscall.EBADF},
		{name: "EBADF/EXCHANGE_RANGE on closed file2 with unknown flag", setup: seq(ab(8192, 8192), closeOp(1)), call: exchangeOp(1, 0, 0, 0, 4096, 16), want: syscall.EBADF},
		{name: "ok/EXCHANGE_RANGE FILE1_WRITTEN", setup: seq(openOp(0, "f1", rdwr|creat), ftruncOp(0, 12288), pwriteOp(0, 4096, 4096, 1), fsyncOp(0), file("f2", 12288, 2), openOp(1, "f2", rdwr)),
			call: exchangeOp(1, 0, 0, 0, 12288, ExchangeFile1Written), after: xlook},
		{name: "ok/EXCHANGE_RANGE FILE1_WRITTEN of dirty pages", setup: seq(openOp(0, "f1", rdwr|creat), ftruncOp(0, 12288), pwriteOp(0, 4096, 4096, 1), file("f2", 12288, 2), openOp(1, "f2", rdwr)),
			call: exchangeOp(1, 0, 0, 0, 12288, ExchangeFile1Written), after: xlook},
		{name: "ok/EXCHANGE_RANGE FILE1_WRITTEN skips fallocated blocks", setup: seq(openOp(0, "f1", rdwr|creat), fallocOp(0, 0, 0, 12288), pwriteOp(0, 4096, 4096, 1), fsyncOp(0), file("f2", 12288, 2), openOp(1, "f2", rdwr)),
			call: exchangeOp(1, 0, 0, 0, 12288, ExchangeFile1Written), after: xlook},
		{name: "ok/EXCHANGE_RANGE of a hole", setup: seq(openOp(0, "f1", rdwr|creat), ftruncOp(0, 12288), pwriteOp(0, 4096, 4096, 1), file("f2", 12288, 2), openOp(1, "f2", rdwr)),
			call: exchangeOp(1, 0, 0, 0, 12288, 0), after: xlook},
		{name: "ok/EXCHANGE_RANGE of dirty and cached pages", setup: seq(ab(16384, 16384), preadOp(0, 0, 16384), pwriteOp(1, 100, 5000, 3)),
			call: exchangeOp(1, 0, 0, 0, 8192, 0), after: xlook},
		{name: "ok/EXCHANGE_RANGE of shared blocks", setup: seq(shared(16384), openOp(2, "e", rdwr|creat), pwriteOp(2, 0, 8192, 5)),
			call: exchangeOp(2, 0, 0, 0, 8192, 0), after: seq(look, cow, preadOp(2, 0, big))},
		// TO_EOF with different offsets leaves file1's last block with
		// file2's bytes past the new EOF; extending must show zeros there.
		{name: "ok/EXCHANGE_RANGE TO_EOF then truncate up", setup: ab(9000, 5000), call: exchangeOp(1, 0, 4096, 0, 0, ExchangeToEOF),
			after: seq(xlook, ftruncOp(0, 16384), preadOp(0, 0, big))},
		{name: "ok/EXCHANGE_RANGE TO_EOF then write past EOF", setup: ab(9000, 5000), call: exchangeOp(1, 0, 4096, 0, 0, ExchangeToEOF),
			after: seq(pwriteOp(0, 7000, 10, 3), preadOp(0, 0, big))},
		{name: "ok/EXCHANGE_RANGE TO_EOF then O_DIRECT write past EOF", setup: ab(9000, 5000), call: exchangeOp(1, 0, 4096, 0, 0, ExchangeToEOF),
			after: seq(openOp(2, "f1", rdwr|direct), pwriteOp(2, 12288, 4096, 3), preadOp(0, 0, big))},
		{name: "ok/EXCHANGE_RANGE TO_EOF then fallocate past EOF", setup: ab(9000, 5000), call: exchangeOp(1, 0, 4096, 0, 0, ExchangeToEOF),
			after: seq(fallocOp(0, 0, 6000, 4000), preadOp(0, 0, big))},
		// XFS keeps the written block the exchange leaves past f1's new
		// EOF, and the clone's zeroing up to its offset skips it: the
		// bytes show. sluice drops the block; POSIX wants zeros.
		{name: "ok/EXCHANGE_RANGE TO_EOF then clone past EOF", setup: seq(ab(9000, 5000), file("s", 4096, 4), openOp(2, "s", rdonly)),
			call: exchangeOp(1, 0, 4096, 0, 0, ExchangeToEOF), after: seq(cloneRangeOp(0, 2, 0, 4096, 12288), preadOp(0, 0, big)),
			engineOnly: "XFS 6.18 shows the bytes a TO_EOF exchange left past EOF when a clone extends the file"},
		{name: "ok/EXCHANGE_RANGE TO_EOF then clone the last block and extend", setup: seq(ab(9000, 5000), openOp(2, "e", rdwr|creat)),
			call: exchangeOp(1, 0, 4096, 0, 0, ExchangeToEOF), after: seq(cloneRangeOp(2, 0, 4096, 0, 0), ftruncOp(2, 8192), preadOp(2, 0, big))},
		{name: "ok/EXCHANGE_RANGE TO_EOF then INSERT_RANGE and extend", setup: ab(9000, 5000), call: exchangeOp(1, 0, 4096, 0, 0, ExchangeToEOF),
			after: seq(fallocOp(0, insertRange, 4096, 4096), ftruncOp(0, 16384), preadOp(0, 0, big))},
		{name: "ok/EXCHANGE_RANGE then writes on both sides", setup: ab(16384, 16384), call: exchangeOp(1, 0, 0, 0, 8192, 0),
			after: seq(pwriteOp(0, 100, 300, 3), openOp(2, "f2", rdwr|direct), pwriteOp(2, 4096, 4096, 4), xlook)},
	}
}
