package crashtest

import (
	"strings"
	"testing"

	"github.com/sluicefs/sluice"
)

// Targeted crash tests: short scripts, crashed with every combination of
// fates of their pending device writes (memdev.CrashImageWith) and several
// metadata prefixes, each crash checked against the model.

const bs4k = 4096

func newScript(t *testing.T, cfg EnvConfig) *Script {
	t.Helper()
	s, err := NewScript(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func do(t *testing.T, s *Script, ops ...Op) {
	t.Helper()
	if err := s.Do(ops...); err != nil {
		t.Fatal(err)
	}
}

// knownBugs maps a targeted test (top-level name) to the entry of
// the issue tracker that makes it fail: such a test logs what
// it finds instead of failing. Remove the entry once the bug is fixed (the
// test says so when it no longer reproduces).
var knownBugs = map[string]string{}

// checker reports the failures of a targeted test, as errors or, for a
// known bug, as log lines.
type checker struct {
	t        *testing.T
	known    string
	failures int
}

func newChecker(t *testing.T) *checker {
	name, _, _ := strings.Cut(t.Name(), "/")
	c := &checker{t: t, known: knownBugs[name]}
	t.Cleanup(func() {
		if c.known != "" && c.failures == 0 && !t.Failed() {
			t.Logf("known engine bug %s no longer reproduces here: remove %s from knownBugs", c.known, name)
		}
	})
	return c
}

func (c *checker) errorf(format string, args ...any) {
	c.t.Helper()
	c.failures++
	switch {
	case c.known == "":
		if c.failures <= 10 {
			c.t.Errorf(format, args...)
		}
	case c.failures <= 3:
		c.t.Logf("known engine bug (%s): "+format, append([]any{c.known}, args...)...)
	}
}

// crashAll runs CrashAll and reports every problem (the first few in
// full).
func crashAll(t *testing.T, s *Script, maxFates, maxMeta int, each func(c *checker, r *CrashResult)) {
	t.Helper()
	c := newChecker(t)
	n, failed := s.CrashAll(maxFates, maxMeta, func(r *CrashResult) {
		if each != nil && r.FS != nil {
			each(c, r)
		}
		if len(r.Problems) > 0 {
			var b strings.Builder
			for _, p := range r.Problems {
				b.WriteString("\n  " + p.String())
			}
			c.errorf("crash %s:%s", r.Desc, b.String())
		}
	})
	t.Logf("%d crashes, %d failed the model check, %d problems reported", n, failed, c.failures)
	if c.failures > 0 {
		t.Logf("ops:")
		for i, op := range s.Ops() {
			t.Logf("  %d %v", i+1, op)
		}
	}
}

// A buffered write made durable by fsync survives every fate of the
// unflushed writes that follow: overwrites in place, a writeback forced by
// a direct read, another file's direct write, a partial punch.
func TestTargetedFsyncSurvivesLaterWrites(t *testing.T) {
	s := newScript(t, EnvConfig{BlockSize: bs4k})
	do(t, s,
		Op{Kind: OpCreate, Path: "/a", H: 0},
		Op{Kind: OpWrite, H: 0, Off: 0, N: 3 * bs4k},
		Op{Kind: OpFsync, H: 0},
		Op{Kind: OpCreate, Path: "/b", H: 1, Flags: sluice.O_DIRECT},
		Op{Kind: OpOpen, Path: "/a", H: 2, Flags: sluice.O_DIRECT},
		Op{Kind: OpWrite, H: 2, Off: bs4k + 1024, N: 1024}, // direct, sub-block, in place
		Op{Kind: OpWrite, H: 0, Off: 2 * bs4k, N: 512},     // buffered, block 2
		Op{Kind: OpRead, H: 2, Off: 2 * bs4k, N: bs4k},     // writes block 2 back
		Op{Kind: OpWrite, H: 1, Off: 0, N: 2 * bs4k},       // another file
		Op{Kind: OpWrite, H: 0, Off: 3 * bs4k, N: bs4k},    // buffered extension, left dirty
		Op{Kind: OpFallocate, H: 0, Flags: sluice.FallocKeepSize | sluice.FallocPunchHole, Off: 512, N: 512},
	)
	crashAll(t, s, 128, 4, nil)
}

// fillAndFree writes a file over most of a small device, makes it durable,
// and removes it, so that its blocks (full of its tagged sectors) are free
// and the next allocations reuse them.
func fillAndFree(t *testing.T, s *Script, blocks int64) {
	do(t, s,
		Op{Kind: OpCreate, Path: "/x", H: 9, Flags: sluice.O_DIRECT},
		Op{Kind: OpWrite, H: 9, Off: 0, N: blocks * bs4k},
		Op{Kind: OpFsync, H: 9},
		Op{Kind: OpClose, H: 9},
		Op{Kind: OpUnlink, Path: "/x"},
		Op{Kind: OpSyncAll},
	)
}

// Writes into fallocated (unwritten) blocks that held another file's data,
// not fsynced, read back as zeros or as the data written, never as the
// blocks' previous contents.
func TestTargetedUnwrittenShowsZerosOrData(t *testing.T) {
	s := newScript(t, EnvConfig{BlockSize: bs4k, DeviceBytes: 1 << 20})
	fillAndFree(t, s, 200)
	do(t, s,
		Op{Kind: OpCreate, Path: "/a", H: 0, Flags: sluice.O_DIRECT},
		Op{Kind: OpFallocate, H: 0, Flags: 0, Off: 0, N: 200 * bs4k},
		Op{Kind: OpFsync, H: 0},
		Op{Kind: OpOpen, Path: "/a", H: 1},
		Op{Kind: OpWrite, H: 0, Off: 3 * bs4k, N: bs4k},       // direct, aligned
		Op{Kind: OpWrite, H: 0, Off: 5*bs4k + 1024, N: 1024},  // direct, sub-block
		Op{Kind: OpWrite, H: 1, Off: 7*bs4k + 512, N: 2048},   // buffered, sub-page
		Op{Kind: OpRead, H: 0, Off: 7 * bs4k, N: bs4k},        // writes it back
		Op{Kind: OpWrite, H: 0, Off: 150 * bs4k, N: 4 * bs4k}, // direct, aligned, several blocks
		Op{Kind: OpFallocate, H: 0, Flags: sluice.FallocKeepSize, Off: 200 * bs4k, N: 8 * bs4k},
		Op{Kind: OpWrite, H: 0, Off: 201*bs4k + 512, N: 512}, // sub-block past EOF, into KEEP_SIZE space
	)
	crashAll(t, s, 64, 3, nil)
}

// Blocks freed by truncate, and by unlink, and reused by another file
// before the crash never show one file's data in the other.
func TestTargetedFreedBlocksReuse(t *testing.T) {
	for _, free := range []string{"truncate", "unlink"} {
		t.Run(free, func(t *testing.T) {
			s := newScript(t, EnvConfig{BlockSize: bs4k, DeviceBytes: 1 << 20})
			do(t, s,
				Op{Kind: OpCreate, Path: "/x", H: 0, Flags: sluice.O_DIRECT},
				Op{Kind: OpWrite, H: 0, Off: 0, N: 200 * bs4k},
				Op{Kind: OpFsync, H: 0},
			)
			if free == "truncate" {
				do(t, s, Op{Kind: OpTruncate, H: 0, Off: 8*bs4k + 512})
			} else {
				do(t, s, Op{Kind: OpClose, H: 0}, Op{Kind: OpUnlink, Path: "/x"})
			}
			// Every free block is busy until the truncate is durable: the
			// allocation below forces the metadata sync that frees them.
			do(t, s,
				Op{Kind: OpCreate, Path: "/b", H: 1, Flags: sluice.O_DIRECT},
				Op{Kind: OpWrite, H: 1, Off: 0, N: 150 * bs4k},
				Op{Kind: OpOpen, Path: "/b", H: 2},
				Op{Kind: OpWrite, H: 2, Off: 150 * bs4k, N: 8 * bs4k}, // buffered, dirty
				Op{Kind: OpWrite, H: 2, Off: 2*bs4k + 512, N: 1024},
				Op{Kind: OpRead, H: 1, Off: 0, N: 4 * bs4k}, // writes block 2 back
			)
			crashAll(t, s, 64, 4, nil)
		})
	}
}

// A file unlinked while open is freed at the next open: its blocks are free
// again, Check is clean and no orphan is left.
func TestTargetedOrphanFreedAtOpen(t *testing.T) {
	for _, synced := range []bool{false, true} {
		name := "unsynced"
		if synced {
			name = "synced"
		}
		t.Run(name, func(t *testing.T) {
			s := newScript(t, EnvConfig{BlockSize: bs4k})
			do(t, s,
				Op{Kind: OpCreate, Path: "/keep", H: 3, Flags: sluice.O_DIRECT},
				Op{Kind: OpWrite, H: 3, Off: 0, N: 4 * bs4k},
				Op{Kind: OpCreate, Path: "/x", H: 0, Flags: sluice.O_DIRECT},
				Op{Kind: OpWrite, H: 0, Off: 0, N: 32 * bs4k},
				Op{Kind: OpFsync, H: 0},
				Op{Kind: OpOpen, Path: "/x", H: 1, Flags: sluice.O_DIRECT},
				Op{Kind: OpOpen, Path: "/x", H: 2},
				Op{Kind: OpUnlink, Path: "/x"},
				Op{Kind: OpWrite, H: 1, Off: 32 * bs4k, N: bs4k}, // the orphan keeps growing
				Op{Kind: OpWrite, H: 2, Off: 40 * bs4k, N: bs4k}, // and has dirty pages
			)
			if synced {
				do(t, s, Op{Kind: OpSyncAll})
			}
			crashAll(t, s, 50, 6, func(c *checker, r *CrashResult) {
				st, err := r.FS.Statfs()
				if err != nil {
					t.Fatal(err)
				}
				ents, err := r.FS.ReadDir("/")
				if err != nil {
					t.Fatal(err)
				}
				var used uint64
				for _, e := range ents {
					a, err := r.FS.Stat("/" + e.Name)
					if err != nil {
						t.Fatal(err)
					}
					used += uint64(a.Blocks * 512 / bs4k)
				}
				if st.BlocksFree+used != st.Blocks {
					c.errorf("%s: %d blocks free + %d used by the files left != %d", r.Desc, st.BlocksFree, used, st.Blocks)
				}
				if synced && (r.Pre == nil || len(r.Pre.Orphans) != 1) {
					c.errorf("%s: before recovery, want one orphan, Check lists %v", r.Desc, r.Pre.Orphans)
				}
			})
		})
	}
}

// Truncating a file down and then up again (or writing past its new EOF)
// must never bring back the bytes cut off: the engine zeroes the tail of
// the EOF block for this (zeroEOFTail) "so that extending the file can
// never expose stale bytes there". The crash keeps the (unsynced) metadata
// commits, which a crash may, and drops the unflushed device writes,
// which it also may.
func TestTargetedTruncateExtendZeroes(t *testing.T) {
	for _, extend := range []string{"truncate", "write", "fallocate"} {
		t.Run(extend, func(t *testing.T) {
			s := newScript(t, EnvConfig{BlockSize: bs4k})
			do(t, s,
				Op{Kind: OpCreate, Path: "/a", H: 0, Flags: sluice.O_DIRECT},
				Op{Kind: OpWrite, H: 0, Off: 0, N: bs4k},
				Op{Kind: OpFsync, H: 0},
				Op{Kind: OpTruncate, H: 0, Off: 512},
			)
			switch extend {
			case "truncate":
				do(t, s, Op{Kind: OpTruncate, H: 0, Off: 2 * bs4k})
			case "write":
				do(t, s, Op{Kind: OpWrite, H: 0, Off: bs4k, N: bs4k})
			case "fallocate":
				do(t, s, Op{Kind: OpFallocate, H: 0, Flags: 0, Off: bs4k, N: bs4k})
			}
			crashAll(t, s, 100, 8, func(c *checker, r *CrashResult) {
				a, err := r.FS.Stat("/a")
				if err != nil {
					t.Fatal(err)
				}
				if a.Size <= bs4k {
					return // the extension was lost: the old bytes may be there
				}
				buf, err := readAll(r.FS, "/a", a.Size, sluice.O_DIRECT)
				if err != nil {
					t.Fatal(err)
				}
				for off := int64(512); off < bs4k; off += SectorSize {
					if k, tag := decodeSector(buf[off : off+SectorSize]); k != Zero {
						c.errorf("%s: size %d, but bytes cut off by the truncate to 512 are back at offset %d: %s",
							r.Desc, a.Size, off, describeSector(k, tag))
						break
					}
				}
			})
		})
	}
}

// A crash can leave bytes past EOF in the EOF block (an extending direct
// write whose size was lost). A buffered write at exactly that EOF then
// extends the file over them without writing them back, and another
// transaction of the inode (a link here; an allocation in the campaign's
// seed 4583) persists the new size: a crash then showed the old write
// where zeros or the buffered write belong. The first write at EOF of a
// mount now makes sure the tail is zeros (checkEOFTail).
func TestTargetedStaleTailUnderBufferedExtension(t *testing.T) {
	c := newChecker(t)
	must := mustFunc(t)
	env2 := lostTailEnv(t)
	b, err := env2.FS.OpenFile("/f", sluice.O_RDWR, 0)
	must(err)
	defer b.Close()
	_, err = b.WriteAt(taggedSectors(512, 3, 5120), 5120) // buffered, at EOF
	must(err)
	must(env2.FS.Link("/f", "/g")) // commits the inode with its new size
	if size := checkTailAfterCrash(t, c, env2, 3); size != 5632 {
		t.Logf("size %d: the link did not persist the extension; the test shows nothing", size)
	}
}
