package fstest

import (
	"strings"
	"syscall"
	"testing"
)

// atomicCases are the POSIX cases of untorn writes (OpPwriteAtomic:
// pwritev2 with RWF_ATOMIC, sluice.RWFAtomic): each argument check with
// its errno, in Linux 6.18's order, then atomic writes that overwrite,
// fill holes and unwritten extents, extend, meet cached pages and shared
// blocks, read back through O_DIRECT and buffered handles. TestPOSIX runs
// them against the XFS oracle (4 KiB blocks: atomic writes of 4 KiB to
// 1 MiB in software, as on sluice); ext4 has no RWF_ATOMIC without
// hardware support (EOPNOTSUPP for every one).
//
// sluice and XFS differ on appends: sluice refuses every atomic append
// with EINVAL (after the length checks), where XFS checks the alignment
// of the offset passed to pwritev2, not of EOF, and then appends (and a
// buffered one gets EOPNOTSUPP). Those cases check the engine's errno
// only.
func atomicCases() []posixCase {
	const big = 2<<20 + 65536 // more than any file here: a read to EOF
	// look reads f back through a new buffered handle (h5) and the
	// O_DIRECT h0.
	look := seq(openOp(5, "f", rdonly), fstatOp(5), preadOp(5, 0, big), preadOp(0, 0, 65536))
	// fd makes f of size bytes of pattern 1 and opens it as h0 with
	// flags.
	fd := func(size int64, flags int) []Op { return seq(file("f", size, 1), openOp(0, "f", flags)) }
	dio := func(size int64) []Op { return fd(size, rdwr|direct) }
	return []posixCase{
		// The checks, in their order: EBADF (the descriptor), then
		// xfs_file_write_iter's lengths, generic_atomic_write_valid's
		// power of two and alignment, and last O_DIRECT.
		{name: "EINVAL/RWF_ATOMIC negative offset", setup: dio(16384), call: atomicOp(0, -16384, 16384, 2), want: syscall.EINVAL},
		{name: "EBADF/RWF_ATOMIC on O_RDONLY", setup: fd(16384, rdonly|direct), call: atomicOp(0, 0, 16384, 2), want: syscall.EBADF},
		{name: "EBADF/RWF_ATOMIC on a closed handle", setup: seq(dio(16384), closeOp(0)), call: atomicOp(0, 0, 16384, 2), want: syscall.EBADF},
		{name: "EBADF/RWF_ATOMIC on a directory", setup: seq(mkdirOp("d"), openOp(0, "d", rdonly)), call: atomicOp(0, 0, 4096, 2), want: syscall.EBADF},
		{name: "EINVAL/RWF_ATOMIC under the smallest unit", setup: dio(16384), call: atomicOp(0, 0, 2048, 2), want: syscall.EINVAL,
			after: seq(fstatOp(0), preadOp(0, 0, 16384))},
		{name: "EINVAL/RWF_ATOMIC over the largest unit", setup: dio(16384), call: atomicOp(0, 0, 2<<20, 2), want: syscall.EINVAL,
			after: seq(fstatOp(0))},
		{name: "EINVAL/RWF_ATOMIC not a power of two", setup: dio(16384), call: atomicOp(0, 0, 12288, 2), want: syscall.EINVAL,
			after: seq(fstatOp(0), preadOp(0, 0, 16384))},
		{name: "EINVAL/RWF_ATOMIC offset not aligned to the length", setup: dio(16384), call: atomicOp(0, 4096, 16384, 2), want: syscall.EINVAL,
			after: seq(fstatOp(0), preadOp(0, 0, 16384))},
		{name: "EINVAL/RWF_ATOMIC offset not aligned to the I/O unit", setup: dio(16384), call: atomicOp(0, 100, 4096, 2), want: syscall.EINVAL},
		{name: "EINVAL/RWF_ATOMIC past EOF at an offset not aligned to the length", setup: dio(0), call: atomicOp(0, 8192, 16384, 2),
			want: syscall.EINVAL, after: seq(fstatOp(0))},
		{name: "EOPNOTSUPP/RWF_ATOMIC buffered", setup: fd(16384, rdwr), call: atomicOp(0, 0, 16384, 2), want: syscall.EOPNOTSUPP,
			after: seq(fstatOp(0), preadOp(0, 0, 16384))},
		{name: "EINVAL/RWF_ATOMIC buffered, not a power of two", setup: fd(16384, rdwr), call: atomicOp(0, 0, 12288, 2), want: syscall.EINVAL},
		{name: "EINVAL/RWF_ATOMIC buffered, under the smallest unit", setup: fd(16384, rdwr), call: atomicOp(0, 0, 512, 2), want: syscall.EINVAL},
		{name: "EINVAL/RWF_ATOMIC buffered, offset not aligned to the length", setup: fd(16384, rdwr), call: atomicOp(0, 4096, 8192, 2),
			want: syscall.EINVAL},
		// Appends. sluice: EINVAL. XFS: the offset passed must be
		// aligned to the length (EINVAL otherwise, which the first case
		// compares), then it appends at EOF, aligned or not to the
		// length (a misaligned O_DIRECT EOF is EINVAL, the second).
		{name: "EINVAL/RWF_ATOMIC on O_APPEND|O_DIRECT, offset passed not aligned", setup: fd(16384, wronly|appnd|direct),
			call: atomicOp(0, 8192, 16384, 2), want: syscall.EINVAL, after: seq(fstatOp(0))},
		{name: "EINVAL/RWF_ATOMIC on O_APPEND|O_DIRECT at a misaligned EOF", setup: fd(1000, wronly|appnd|direct),
			call: atomicOp(0, 0, 4096, 2), want: syscall.EINVAL, after: seq(fstatOp(0))},
		{name: "EINVAL/RWF_ATOMIC on O_APPEND|O_DIRECT at an aligned EOF", setup: fd(16384, wronly|appnd|direct),
			call: atomicOp(0, 0, 16384, 2), want: syscall.EINVAL, after: seq(fstatOp(0)),
			engineOnly: "XFS 6.18 appends atomically at EOF (it checks the alignment of the offset passed, not EOF's); sluice takes no atomic appends"},
		{name: "EINVAL/RWF_ATOMIC on O_APPEND buffered", setup: fd(16384, wronly|appnd), call: atomicOp(0, 0, 16384, 2), want: syscall.EINVAL,
			engineOnly: "XFS 6.18 says EOPNOTSUPP (buffered) where sluice says EINVAL (an append) first"},

		// Writes.
		{name: "ok/RWF_ATOMIC overwrite", setup: dio(32768), call: atomicOp(0, 8192, 8192, 2), after: look},
		{name: "ok/RWF_ATOMIC of the smallest unit", setup: dio(16384), call: atomicOp(0, 12288, 4096, 2), after: look},
		{name: "ok/RWF_ATOMIC of the largest unit", setup: dio(8192), call: atomicOp(0, 1<<20, 1<<20, 2), after: look},
		{name: "ok/RWF_ATOMIC of the largest unit over data", setup: seq(dio(0), pwriteOp(0, 0, 1<<20, 1)), call: atomicOp(0, 0, 1<<20, 2),
			after: look},
		{name: "ok/RWF_ATOMIC into a hole", setup: seq(dio(0), ftruncOp(0, 65536)), call: atomicOp(0, 16384, 16384, 2), after: look},
		{name: "ok/RWF_ATOMIC past EOF", setup: dio(5000), call: atomicOp(0, 32768, 16384, 2), after: look},
		{name: "ok/RWF_ATOMIC over the partial EOF block", setup: dio(5000), call: atomicOp(0, 0, 8192, 2), after: look},
		{name: "ok/RWF_ATOMIC into a fallocated range", setup: seq(dio(0), fallocOp(0, 0, 0, 32768)), call: atomicOp(0, 8192, 8192, 2),
			after: look},
		{name: "ok/RWF_ATOMIC into a fallocated range past EOF", setup: seq(dio(4096), fallocOp(0, keepSize, 0, 65536)),
			call: atomicOp(0, 16384, 16384, 2), after: look},
		{name: "ok/RWF_ATOMIC over data and a hole", setup: seq(dio(0), pwriteOp(0, 0, 8192, 1), ftruncOp(0, 32768)),
			call: atomicOp(0, 0, 16384, 2), after: look},
		{name: "ok/RWF_ATOMIC twice over one range", setup: seq(dio(16384), atomicOp(0, 0, 16384, 2)), call: atomicOp(0, 0, 16384, 3),
			after: look},
		{name: "ok/RWF_ATOMIC within an earlier one", setup: seq(dio(0), atomicOp(0, 0, 32768, 2)), call: atomicOp(0, 8192, 4096, 3),
			after: look},
		{name: "ok/RWF_ATOMIC with O_DSYNC", setup: fd(16384, rdwr|direct|syscall.O_DSYNC), call: atomicOp(0, 0, 16384, 2), after: look},
		{name: "ok/RWF_ATOMIC over dirty cached pages", setup: seq(openOp(1, "f", rdwr|creat), pwriteOp(1, 100, 20000, 1), openOp(0, "f", rdwr|direct)),
			call: atomicOp(0, 0, 16384, 2), after: seq(preadOp(1, 0, big), look)},
		{name: "ok/RWF_ATOMIC then buffered writes over it", setup: seq(dio(0), openOp(1, "f", rdwr)), call: atomicOp(0, 0, 16384, 2),
			after: seq(pwriteOp(1, 3000, 5000, 3), preadOp(0, 0, 16384), look)},
		{name: "ok/RWF_ATOMIC then a write across it", setup: dio(32768), call: atomicOp(0, 8192, 8192, 2),
			after: seq(pwriteOp(0, 12288, 8192, 3), look)},
		{name: "ok/RWF_ATOMIC then punch and truncate", setup: dio(65536), call: atomicOp(0, 16384, 16384, 2),
			after: seq(fallocOp(0, punchHole|keepSize, 20000, 5000), ftruncOp(0, 30000), look, ftruncOp(0, 40000), look)},
		{name: "ok/RWF_ATOMIC then ZERO_RANGE", setup: dio(65536), call: atomicOp(0, 0, 32768, 2),
			after: seq(fallocOp(0, zeroRange, 4096, 8192), look)},
		{name: "ok/RWF_ATOMIC into a clone", setup: seq(file("s", 16384, 1), openOp(0, "f", rdwr|creat|direct), openOp(1, "s", rdonly), cloneOp(0, 1)),
			call: atomicOp(0, 8192, 8192, 3), after: seq(preadOp(1, 0, big), look)},
		{name: "ok/RWF_ATOMIC into a clone's source", setup: seq(dio(16384), openOp(1, "d", rdwr|creat), cloneOp(1, 0)),
			call: atomicOp(0, 0, 16384, 3), after: seq(preadOp(1, 0, big), look)},
		{name: "ok/RWF_ATOMIC then clone it", setup: seq(dio(0), openOp(1, "d", rdwr|creat)), call: atomicOp(0, 0, 16384, 2),
			after: seq(cloneRangeOp(1, 0, 0, 16384, 4096), preadOp(1, 0, big), atomicOp(0, 0, 8192, 3), preadOp(1, 0, big), look)},
		{name: "ok/RWF_ATOMIC after fsync", setup: seq(dio(16384), atomicOp(0, 0, 16384, 2), fsyncOp(0)), call: atomicOp(0, 0, 8192, 3),
			after: seq(fdatasyncOp(0), look)},
	}
}

// TestAtomicCasesOnModel runs atomicCases on the engine and on the model,
// whose rules the metamorphic sequences trust: the transcripts must be
// equal (the append cases too: the model follows sluice there).
func TestAtomicCasesOnModel(t *testing.T) {
	for _, c := range atomicCases() {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			el, _, _ := transcript(newTestEngine(t, EngineConfig{}), c)
			ml, msetup, mcall := transcript(NewModel(512, 4096), c)
			if len(msetup) > 0 || mcall != "" {
				t.Fatalf("on the model setup failed %q / call %s", msetup, mcall)
			}
			if d := diffLines("sluice", el, "model ", ml); d != "" {
				t.Errorf("transcripts differ:\n%s", d)
			}
		})
	}
}

// TestAtomicZeroLength writes nothing with RWF_ATOMIC. Linux returns 0
// before it looks at the flags (vfs_writev; xfs_file_write_iter too, for
// io_uring), whatever the offset and O_DIRECT, as the model does (and the
// XFS oracle, compared first); sluice's atomicWriteCheck said EINVAL (a
// length under AtomicWriteLimits' UnitMin) until it ran only on writes of
// some bytes.
func TestAtomicZeroLength(t *testing.T) {
	c := posixCase{setup: seq(file("f", 16384, 1), openOp(0, "f", rdwr|direct), openOp(1, "f", rdwr)),
		call: atomicOp(0, 100, 0, 2), after: seq(atomicOp(0, 4096, 0, 2), atomicOp(1, 0, 0, 2), fstatOp(0))}
	regressCase(t, "a zero-length RWF_ATOMIC write", c)
}

// regressCase runs c on the model, on the host (XFS where it has one), to
// check the model, and on the engine, which must agree with the model.
func regressCase(t *testing.T, what string, c posixCase) {
	t.Helper()
	ml, _, call := transcript(NewModel(512, 4096), c)
	if call != "" {
		t.Fatalf("model: %s", call)
	}
	if host, why := hostFor(t, seq(c.setup, c.call), 4096); host != nil {
		hl, _, _ := transcript(host, c)
		if d := diffLines("model", ml, host.Name(), hl); d != "" {
			t.Fatalf("the model is wrong:\n%s", d)
		}
	} else {
		t.Logf("host not compared: %s", why)
	}
	el, _, _ := transcript(newTestEngine(t, EngineConfig{}), c)
	if d := diffLines("sluice", el, "model ", ml); d != "" {
		t.Fatalf("%s:\n%s", what, d)
	}
}
