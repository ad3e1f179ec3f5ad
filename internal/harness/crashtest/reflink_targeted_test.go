package crashtest

import (
	"fmt"
	"testing"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/memdev"
)

// Targeted crash tests of reflink: clones, the two copy-on-write routes,
// collapse and insert range, and the engine bugs the campaign found there
// (doc.go, "Known engine bugs the generator steps around").

// A clone between two files and one within a file, both copy-on-write
// routes into the shared blocks (whole blocks O_DIRECT out of place;
// sub-block direct, buffered and UNSHARE_RANGE copying first), a collapse
// and an insert range, none synced: every crash shows each file wholly
// before or after each clone and shift, and Check clean.
func TestTargetedCloneCrash(t *testing.T) {
	s := newScript(t, EnvConfig{BlockSize: bs4k})
	do(t, s,
		Op{Kind: OpCreate, Path: "/a", H: 0, Flags: sluice.O_DIRECT},
		Op{Kind: OpWrite, H: 0, Off: 0, N: 8 * bs4k},
		Op{Kind: OpOpen, Path: "/a", H: 1},
		Op{Kind: OpWrite, H: 1, Off: 8 * bs4k, N: 3*bs4k + 1024}, // buffered: the clone writes it back
		Op{Kind: OpFsync, H: 0},
		Op{Kind: OpCreate, Path: "/b", H: 2, Flags: sluice.O_DIRECT},
		Op{Kind: OpWrite, H: 2, Off: 0, N: 4 * bs4k},
		Op{Kind: OpClone, H: 2, H2: 0, Off2: 2 * bs4k, Off: 2 * bs4k, N: 4 * bs4k},
		Op{Kind: OpClone, H: 2, H2: 0, Off2: 8 * bs4k, Off: 12 * bs4k, N: 3*bs4k + 1024}, // to EOF, unaligned tail
		Op{Kind: OpClone, H: 0, H2: 0, Off2: 0, Off: 16 * bs4k, N: 2 * bs4k},             // within a, past EOF
		Op{Kind: OpWrite, H: 2, Off: 3 * bs4k, N: bs4k},                                  // whole block, out of place
		Op{Kind: OpWrite, H: 0, Off: 4*bs4k + 512, N: 1024},                              // sub-block direct: copies first
		Op{Kind: OpWrite, H: 1, Off: 5*bs4k + 1536, N: 512},                              // buffered: copies first
		Op{Kind: OpFallocate, H: 2, Flags: sluice.FallocUnshareRange, Off: 13 * bs4k, N: bs4k},
		Op{Kind: OpCollapse, H: 0, Off: bs4k, N: bs4k},
		Op{Kind: OpWrite, H: 0, Off: 6 * bs4k, N: bs4k}, // in place into a moved block
		Op{Kind: OpInsert, H: 2, Off: 0, N: 2 * bs4k},
	)
	crashAll(t, s, 32, 6, nil)
}

// An O_DIRECT append of whole blocks at an EOF inside a shared block.
// directWrite takes an append's route from its length alone (the offset
// is EOF, unknown yet), so the aligned route meets a partial shared block,
// which planWrite refuses to write in place: it failed with EIO until the
// aligned route sent such an append to the sub-block route's copy.
func TestTargetedDirectAppendAtSharedEOF(t *testing.T) {
	c := newChecker(t)
	for _, appendHow := range []string{"O_APPEND", "RWFAppend"} {
		s := newScript(t, EnvConfig{BlockSize: bs4k})
		do(t, s,
			Op{Kind: OpCreate, Path: "/a", H: 0, Flags: sluice.O_DIRECT},
			Op{Kind: OpWrite, H: 0, Off: 0, N: bs4k + 1536},
			Op{Kind: OpCreate, Path: "/b", H: 1},
			Op{Kind: OpClone, H: 1, H2: 0, Flags: 1},
		)
		app := Op{Kind: OpWrite, H: 0, Off: 0, N: bs4k, Flags: int(sluice.RWFAppend)}
		if appendHow == "O_APPEND" {
			do(t, s, Op{Kind: OpOpen, Path: "/a", H: 2, Flags: sluice.O_DIRECT | sluice.O_APPEND})
			app = Op{Kind: OpWrite, H: 2, Off: 0, N: bs4k}
		}
		if err := s.Do(app); err != nil {
			c.errorf("%s: %v", appendHow, err)
		}
	}
}

// A clone within one file past its EOF, the EOF block shared (with b),
// zeroes the EOF block's tail (xfs_reflink_zero_posteof) by copying it on
// write: the clone must not share the staging block that this pending
// remap names. (It did: the crash then found the block staged and mapped,
// with a shared record counting 2 and one extent (staged-in-use,
// wrong-refcount), and opening failed on a corrupt refcount record.)
func TestTargetedSameFileClonePastSharedEOF(t *testing.T) {
	s := newScript(t, EnvConfig{BlockSize: bs4k})
	do(t, s,
		Op{Kind: OpCreate, Path: "/a", H: 0, Flags: sluice.O_DIRECT},
		Op{Kind: OpWrite, H: 0, Off: 0, N: bs4k},
		Op{Kind: OpTruncate, H: 0, Off: 2048},
		Op{Kind: OpCreate, Path: "/b", H: 1},
		Op{Kind: OpClone, H: 1, H2: 0, Flags: 1},
		Op{Kind: OpClone, H: 0, H2: 0, Off2: 0, Off: bs4k, N: 2048},
	)
	crashAll(t, s, 16, 4, nil)
}

// A crash can leave data past EOF in the EOF block: here a collapse writes
// back a buffered write past the durable size (5120), and the first crash
// keeps the data but not the collapse. After recovery an O_DIRECT write
// over the whole EOF block extends the file to 8192, and the second crash
// drops the write and keeps what metadata there is: [5120, 8192) must read
// as zeros or the write, never the buffered write from before the first
// crash, which was never part of the file. (It did show when the
// extension's size was committed before its data was durable.)
func TestTargetedStaleTailAfterTwoCrashes(t *testing.T) {
	c := newChecker(t)
	must := mustFunc(t)
	fill := taggedSectors
	env, err := NewEnv(EnvConfig{BlockSize: bs4k})
	must(err)
	defer env.Close()
	d, err := env.FS.OpenFile("/f", sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECT, 0o644)
	must(err)
	defer d.Close()
	b, err := env.FS.OpenFile("/f", sluice.O_RDWR, 0)
	must(err)
	defer b.Close()
	_, err = d.WriteAt(fill(2*bs4k, 1, 0), 0)
	must(err)
	must(d.Truncate(5120))
	must(d.Fsync())
	_, err = b.WriteAt(fill(3072, 2, 5120), 5120)
	must(err)
	must(b.Fallocate(sluice.FallocCollapseRange, 0, bs4k))
	_, synced := env.KV.Commits()
	env2 := crashAndOpen(t, env, 1, keepWrites, synced)
	d2, err := env2.FS.OpenFile("/f", sluice.O_RDWR|sluice.O_DIRECT, 0)
	must(err)
	defer d2.Close()
	_, err = d2.WriteAt(fill(bs4k, 3, bs4k), bs4k)
	must(err)
	checkTailAfterCrash(t, c, env2, 3)
}

// A crash can leave data past EOF in the EOF block (here a sub-block
// extension whose size was lost), and a clone to EOF shares that block.
// Extending the file then zeroes the tail on a copy of the block, a remap
// pending until the next sync point, while the extension's size commits
// at once: a crash in between kept the new size over the shared block,
// and the stale tail showed (the campaign's seed 210). zeroEOFTail now
// makes such a remap durable before the size can be.
func TestTargetedStaleTailInSharedEOFBlock(t *testing.T) {
	c := newChecker(t)
	must := mustFunc(t)
	env2 := lostTailEnv(t)
	f2, err := env2.FS.OpenFile("/f", sluice.O_RDWR|sluice.O_DIRECT, 0)
	must(err)
	defer f2.Close()
	g, err := env2.FS.OpenFile("/g", sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECT, 0o644)
	must(err)
	defer g.Close()
	must(g.CloneRange(f2, 0, 0, 5120)) // to EOF: shares the EOF block
	must(f2.Fallocate(0, 5120, 1024))  // extends f over the stale tail
	checkTailAfterCrash(t, c, env2, 0)
}

// lostTailEnv returns the file system a crash left with /f holding 5120
// synced bytes (write 1) and, past EOF in its EOF block, 1024 bytes of
// write 2, an extending direct write whose size the crash lost.
func lostTailEnv(t *testing.T) *Env {
	must := mustFunc(t)
	env, err := NewEnv(EnvConfig{BlockSize: bs4k})
	must(err)
	t.Cleanup(func() { env.Close() })
	f, err := env.FS.OpenFile("/f", sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECT, 0o644)
	must(err)
	defer f.Close()
	_, err = f.WriteAt(taggedSectors(2*bs4k, 1, 0), 0)
	must(err)
	must(f.Truncate(5120))
	must(f.Fsync())
	_, err = f.WriteAt(taggedSectors(1024, 2, 5120), 5120) // its size is lost
	must(err)
	_, synced := env.KV.Commits()
	return crashAndOpen(t, env, 1, keepWrites, synced)
}

// crashAndOpen crashes env, each pending device write meeting fate and the
// metadata as after its first upTo commits, and opens the image (closed
// when t ends).
func crashAndOpen(t *testing.T, env *Env, seed uint64, fate func(memdev.PendingWrite) memdev.Fate, upTo uint64) *Env {
	must := mustFunc(t)
	img, err := env.Crash(seed, fate, MetaCrash{UpTo: upTo})
	must(err)
	next, _, err := img.Open(env.Opts)
	must(err)
	t.Cleanup(func() { next.Close() })
	return next
}

// checkTailAfterCrash crashes env keeping every metadata commit and
// dropping every pending device write, and reports (through c) every
// sector of /f past offset 5120 that holds anything but zeros or, if seq
// is not 0, write seq. It returns /f's size.
func checkTailAfterCrash(t *testing.T, c *checker, env *Env, seq uint64) int64 {
	must := mustFunc(t)
	commits, _ := env.KV.Commits()
	env3 := crashAndOpen(t, env, 2, dropWrites, commits)
	f, err := env3.FS.OpenFile("/f", sluice.O_RDONLY|sluice.O_DIRECT, 0)
	must(err)
	defer f.Close()
	a, err := f.Stat()
	must(err)
	buf, err := readFile(f, a.Size)
	must(err)
	allowed := "zeros"
	if seq != 0 {
		allowed = fmt.Sprintf("zeros or write %d", seq)
	}
	for o := int64(5120); o < a.Size; o += SectorSize {
		if k, tag := decodeSector(buf[o : o+SectorSize]); k != Zero && !(seq != 0 && k == Tagged && tag.Seq == seq) {
			c.errorf("size %d: offset %d holds %s; allowed: %s", a.Size, o, describeSector(k, tag), allowed)
		}
	}
	return a.Size
}

// mustFunc returns a function that fails t on an error.
func mustFunc(t *testing.T) func(error) {
	return func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// taggedSectors returns n bytes of the sectors write seq puts at file
// offset off of file 1.
func taggedSectors(n int, seq uint64, off int64) []byte {
	b := device.AlignedBuf(n)
	for i := 0; i < n; i += SectorSize {
		fillSector(b[i:i+SectorSize], Tag{File: 1, Seq: seq, Off: off + int64(i)})
	}
	return b
}

// keepWrites and dropWrites are crash fates for every pending write.
func keepWrites(memdev.PendingWrite) memdev.Fate { return memdev.Fate{Kind: memdev.Keep} }
func dropWrites(memdev.PendingWrite) memdev.Fate { return memdev.Fate{Kind: memdev.Drop} }
