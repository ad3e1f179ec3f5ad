package sluice

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/pagecache"
	"github.com/sluicefs/sluice/volume"
)

// The read-before-write rule of seed 004, observed through the count of
// device reads the page cache issues (CacheReads) on a cold cache.

// coldFile writes n bytes to path O_DIRECT, fsyncs, closes and reopens the
// file system (cold cache), and returns the environment and the file open
// for buffered writing.
func coldFile(t *testing.T, pol Policy, cfg envConfig, n int) (*testEnv, *File) {
	t.Helper()
	cfg.opts.Policy = &pol
	e := newEnv(t, cfg)
	f := e.mustCreate("/f", 0)
	if _, err := f.WriteAt(pattern(n, 1), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e2 := e.reopen()
	g, err := e2.fs.OpenFile("/f", O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	e2.fs.ResetCounters()
	return e2, g
}

func TestReadBeforeWriteRule(t *testing.T) {
	const ps = 4096
	cases := []struct {
		name       string
		ioUnit     int // device I/O unit (block size 4 KiB)
		size       int // file size before the write
		off, n     int // the buffered write
		twice      bool
		gap        int    // between the first write and the second (twice)
		concurrent int64  // device reads under the concurrent policy
		classic    int64  // device reads under the classic policy
		why        string // the counter of readBeforeWrite's reason under concurrent
	}{
		{name: "full page overwrite", ioUnit: 4096, size: 4 * ps, off: ps, n: ps, concurrent: 0, classic: 1, why: "RBWSkipFullWrite"},
		{name: "covers every byte below EOF of the last page", ioUnit: 4096, size: 2*ps + 1000, off: 2 * ps, n: 1000, concurrent: 0, classic: 1, why: "RBWSkipFullWrite"},
		{name: "from page start to past EOF", ioUnit: 4096, size: 2*ps + 1000, off: 2 * ps, n: 3000, concurrent: 0, classic: 1, why: "RBWSkipFullWrite"},
		// Past EOF, classic reads the page too, but its block is a hole:
		// zeros, without a device read.
		{name: "page wholly past EOF", ioUnit: 4096, size: 2 * ps, off: 3*ps + 100, n: 100, concurrent: 0, classic: 0, why: "RBWSkipFullWrite"},
		{name: "partial overwrite, 4 KiB unit", ioUnit: 4096, size: 4 * ps, off: ps + 100, n: 200, concurrent: 1, classic: 1, why: "RBWReadPartial"},
		{name: "partial overwrite, 512 B unit", ioUnit: 512, size: 4 * ps, off: ps + 100, n: 200, concurrent: 1, classic: 1, why: "RBWReadPartial"},
		{name: "sector-aligned partial overwrite, 512 B unit", ioUnit: 512, size: 4 * ps, off: ps + 512, n: 1024, concurrent: 0, classic: 1, why: "RBWSkipUnitAligned"},
		// The first write leaves a pending partial page (512 B unit);
		// the second, unaligned, finds the write pending: no read.
		{name: "partial write to a page with a pending write", ioUnit: 512, size: 4 * ps, off: ps + 512, n: 1024, twice: true, concurrent: 0, classic: 1, why: "RBWSkipPending"},
		// ... unless the two cannot form one contiguous valid range: then
		// the page is read in, keeping the pending bytes.
		{name: "write apart from a pending write", ioUnit: 512, size: 4 * ps, off: ps + 512, n: 1024, twice: true, gap: 100, concurrent: 1, classic: 1, why: "RBWReadIncompatible"},
	}
	for _, pol := range []Policy{Concurrent(), Classic()} {
		for _, c := range cases {
			t.Run(pol.String()+"/"+c.name, func(t *testing.T) {
				e, f := coldFile(t, pol, envConfig{ioUnit: c.ioUnit}, c.size)
				if _, err := f.WriteAt(pattern(c.n, 9), int64(c.off)); err != nil {
					t.Fatal(err)
				}
				if c.twice {
					// The page now has a pending write (not uptodate
					// under concurrent, uptodate under classic):
					// another partial write next to it reads nothing.
					if _, err := f.WriteAt(pattern(50, 10), int64(c.off+c.n+c.gap)); err != nil {
						t.Fatal(err)
					}
				}
				want := c.concurrent
				if !pol.SkipFullPageRMW {
					want = c.classic
				}
				cv := e.fs.Counters()
				if got := cv["CacheReads"]; got != want {
					t.Fatalf("%d device reads, want %d", got, want)
				}
				if pol.SkipFullPageRMW && cv[c.why] == 0 {
					t.Fatalf("readBeforeWrite did not decide %s: %v", c.why, cv)
				}
				// Whatever was read or not, the file is right.
				model := pattern(c.size, 1)
				for len(model) < c.off+c.n {
					model = append(model, 0)
				}
				copy(model[c.off:], pattern(c.n, 9))
				if c.twice {
					model = append(model, make([]byte, max(0, c.off+c.n+c.gap+50-len(model)))...)
					copy(model[c.off+c.n+c.gap:], pattern(50, 10))
				}
				if got := mustReadAll(t, f); !bytes.Equal(got, model) {
					t.Fatal("file differs from the model")
				}
				if err := f.Fsync(); err != nil {
					t.Fatal(err)
				}
				if got := mustReadAll(t, f); !bytes.Equal(got, model) {
					t.Fatal("file differs from the model after writeback")
				}
			})
		}
	}
}

// TestReadBeforeZeroing: zeroing part of a written block in place (here a
// truncate into the middle of an I/O unit) reads that unit first, so the
// bytes before the new EOF in the same unit survive; a cut on a unit
// boundary reads nothing.
func TestReadBeforeZeroing(t *testing.T) {
	for _, c := range []struct {
		size  int64
		reads int64
	}{{4096 + 1000, 1}, {4096 + 1024, 0}} {
		e := policyEnv(t, Concurrent())
		f, data := e.prewrite("/f", 2*4096, 3)
		e.fs.ResetCounters()
		if err := f.Truncate(c.size); err != nil {
			t.Fatal(err)
		}
		if got := e.fs.Counters()["RBWReadZeroUnit"]; got != c.reads {
			t.Fatalf("truncate to %d: %d unit reads before zeroing, want %d", c.size, got, c.reads)
		}
		if err := f.Truncate(2 * 4096); err != nil {
			t.Fatal(err)
		}
		want := append(bytes.Clone(data[:c.size]), make([]byte, 2*4096-c.size)...)
		if got := mustReadAll(t, f); !bytes.Equal(got, want) {
			t.Fatalf("truncate to %d and back: the kept bytes or the zeros are wrong", c.size)
		}
	}
}

// TestLargeUnitWriteback: on a device whose I/O unit (64 KiB) is larger
// than a page, a sequential full-page overwrite reads nothing back at
// writeback (each unit is fully dirty), while a lone partial page makes
// the writeback read its unit back.
func TestLargeUnitWriteback(t *testing.T) {
	cfg := envConfig{ioUnit: 64 << 10, blockSize: 64 << 10, size: 64 << 20}
	e, f := coldFile(t, Concurrent(), cfg, 256<<10)
	for off := 0; off < 128<<10; off += 4096 {
		if _, err := f.WriteAt(pattern(4096, byte(off/4096)), int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	c := e.fs.Counters()
	if c["CacheReads"] != 0 || c["CacheRMWUnitReads"] != 0 {
		t.Fatalf("sequential overwrite read %d pages and %d units; want none", c["CacheReads"], c["CacheRMWUnitReads"])
	}
	e.fs.ResetCounters()
	if _, err := f.WriteAt(pattern(4096, 99), 192<<10); err != nil { // one page of the 4th unit
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	if got := e.fs.Counters()["CacheRMWUnitReads"]; got != 1 {
		t.Fatalf("%d unit reads at writeback, want 1", got)
	}
	model := pattern(256<<10, 1)
	for off := 0; off < 128<<10; off += 4096 {
		copy(model[off:], pattern(4096, byte(off/4096)))
	}
	copy(model[192<<10:], pattern(4096, 99))
	if got := mustReadAll(t, f); !bytes.Equal(got, model) {
		t.Fatal("file differs from the model")
	}
}

// TestLargeUnitNeighbourPages: on a device with a 64 KiB I/O unit, a unit
// read for one page fills the unit's other uncached pages too, so small
// sequential writes cost one unit read per unit, not one per write: the
// read-modify-write at writeback of O_SYNC 4 KiB writes (concurrent), and
// the page read before each write (classic). Pages already cached keep
// their (newer) bytes, and the file equals the model.
func TestLargeUnitNeighbourPages(t *testing.T) {
	const unit, n = 64 << 10, 256 << 10
	cfg := envConfig{ioUnit: unit, blockSize: unit, size: 64 << 20}
	for _, pol := range []Policy{Concurrent(), Classic()} {
		t.Run(pol.String(), func(t *testing.T) {
			e, f := coldFile(t, pol, cfg, n)
			model := pattern(n, 1)
			// A page of the second unit is cached and dirty before the
			// sequential writes reach it: the unit read must not
			// overwrite it.
			if _, err := f.WriteAt(pattern(100, 7), unit+3*4096+10); err != nil {
				t.Fatal(err)
			}
			copy(model[unit+3*4096+10:], pattern(100, 7))
			e.fs.ResetCounters()
			for off := 0; off < n; off += 4096 {
				if off == unit+3*4096 {
					continue
				}
				if _, err := f.WriteAt(pattern(4096, byte(off/4096)), int64(off)); err != nil {
					t.Fatal(err)
				}
				copy(model[off:], pattern(4096, byte(off/4096)))
				if pol.SkipFullPageRMW {
					if err := f.Fsync(); err != nil { // as O_SYNC
						t.Fatal(err)
					}
				}
			}
			if err := f.Fsync(); err != nil {
				t.Fatal(err)
			}
			c := e.fs.Counters()
			reads := c["CacheReads"] + c["CacheRMWUnitReads"]
			t.Logf("page reads %d, unit reads at writeback %d, neighbour pages filled %d",
				c["CacheReads"], c["CacheRMWUnitReads"], c["UnitNeighbourPages"])
			if reads > n/unit {
				t.Errorf("%d device reads for %d units, want at most one per unit", reads, n/unit)
			}
			if got := mustReadAll(t, f); !bytes.Equal(got, model) {
				t.Fatal("file differs from the model")
			}
		})
	}
}

// TestLargeUnitReadahead: a cold sequential buffered read on a device with
// a 64 KiB I/O unit reads each unit once, not once per page.
func TestLargeUnitReadahead(t *testing.T) {
	const unit, n = 64 << 10, 1 << 20
	cfg := envConfig{ioUnit: unit, blockSize: unit, size: 64 << 20}
	e, f := coldFile(t, Concurrent(), cfg, n)
	got := make([]byte, n)
	for off := 0; off < n; off += 8192 {
		if _, err := f.ReadAt(got[off:off+8192], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, pattern(n, 1)) {
		t.Fatal("read differs from the file")
	}
	c := e.fs.Counters()
	t.Logf("unit reads %d, readahead pages %d, neighbour pages %d", c["CacheReads"], c["ReadaheadPages"], c["UnitNeighbourPages"])
	if c["CacheReads"] > n/unit {
		t.Errorf("%d device reads for %d units", c["CacheReads"], n/unit)
	}
}

// TestNeighbourPagesVsDirectWrites: buffered readers keep reading (and so
// filling neighbour pages from unit reads) a unit that a direct writer
// keeps rewriting; after each direct write returns, a buffered read of any
// page of the unit sees that write's bytes, never a page filled from a
// unit read that the write overtook. (Each direct write drops the unit's
// cached pages, so the readers keep reading the unit again.)
func TestNeighbourPagesVsDirectWrites(t *testing.T) {
	const unit = 64 << 10
	cfg := envConfig{ioUnit: unit, blockSize: unit, size: 64 << 20}
	e, f := coldFile(t, Concurrent(), cfg, 4*unit)
	d, err := e.fs.OpenFile("/f", O_RDWR|O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 5))
			buf := make([]byte, 4096)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := f.ReadAt(buf, unit+rng.Int64N(16)*4096); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(9, 9))
	buf := device.AlignedBuf(unit)
	got := make([]byte, 4096)
	for v := range 300 {
		copy(buf, pattern(unit, byte(v)))
		if _, err := d.WriteAt(buf, unit); err != nil {
			t.Fatal(err)
		}
		pg := rng.Int64N(16)
		if _, err := f.ReadAt(got, unit+pg*4096); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, buf[pg*4096:(pg+1)*4096]) {
			t.Fatalf("version %d: buffered read of page %d shows older bytes", v, pg)
		}
	}
	t.Logf("neighbour pages filled: %d", e.fs.Counters()["UnitNeighbourPages"])
}

// TestMixedBufferedAndDirect: many goroutines write the same file through
// buffered and O_DIRECT handles, each owning its own blocks (so the final
// content is defined), while others read; the result equals the model and
// Check is clean.
func TestMixedBufferedAndDirect(t *testing.T) {
	for _, pol := range []Policy{Concurrent(), Classic()} {
		t.Run(pol.String(), func(t *testing.T) {
			e := policyEnv(t, pol)
			const blocks, workers = 64, 8
			df, _ := e.prewrite("/f", blocks*4096, 1)
			bf, err := e.fs.OpenFile("/f", O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer bf.Close()
			model := pattern(blocks*4096, 1)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 5))
					for i := range 60 {
						blk := rng.IntN(blocks/workers)*workers + w // owned
						var buf []byte
						var off int64
						if rng.IntN(2) == 0 {
							// Buffered: any bytes of the block.
							lo := rng.IntN(4096)
							hi := lo + 1 + rng.IntN(4096-lo)
							buf, off = pattern(hi-lo, byte(w*60+i)), int64(blk*4096+lo)
							if _, err := bf.WriteAt(buf, off); err != nil {
								t.Error(err)
								return
							}
						} else {
							// Direct: whole sectors of the block.
							lo := rng.IntN(8) * 512
							hi := lo + 512*(1+rng.IntN((4096-lo)/512))
							buf, off = pattern(hi-lo, byte(w*60+i)), int64(blk*4096+lo)
							if _, err := df.WriteAt(buf, off); err != nil {
								t.Error(err)
								return
							}
						}
						mu.Lock()
						copy(model[off:], buf)
						mu.Unlock()
						if i%10 == 0 {
							rb := pattern(4096, 0)
							if _, err := df.ReadAt(rb, int64(blk*4096)); err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							ok := bytes.Equal(rb, model[blk*4096:(blk+1)*4096])
							mu.Unlock()
							if !ok {
								t.Errorf("worker %d: direct read of its block %d differs from its last write", w, blk)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			if got := mustReadAll(t, bf); !bytes.Equal(got, model) {
				t.Fatal("buffered read differs from the model")
			}
			if got := mustReadAll(t, df); !bytes.Equal(got, model) {
				t.Fatal("direct read differs from the model")
			}
			checkClean(t, e.fs)
		})
	}
}

// TestCacheMemoryCap: writing four times the cache capacity through the
// page cache of a real volume keeps the cache's buffers within the cap and
// the process's peak RSS within the cap plus a fixed allowance.
func TestCacheMemoryCap(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 64 MiB to the disk")
	}
	const capBytes = 16 << 20
	dir := filepath.Join(t.TempDir(), "vol")
	if err := volume.Mkfs(dir, volume.MkfsOptions{Size: 256 << 20}); err != nil {
		t.Fatal(err)
	}
	fs, err := Open(dir, &Options{CacheSizeBytes: capBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	f, err := fs.Create("/big")
	if err != nil {
		t.Fatal(err)
	}
	before := peakRSS(t)
	buf := pattern(256<<10, 3)
	for off := int64(0); off < 4*capBytes; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if s := fs.cache.Stats(); s.Buffers*int64(fs.cache.PageSize()) > capBytes {
			t.Fatalf("cache holds %d buffers of %d B, over the %d B cap", s.Buffers, fs.cache.PageSize(), capBytes)
		}
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	grew := peakRSS(t) - before
	t.Logf("peak RSS grew by %d MiB writing %d MiB through a %d MiB cache", grew>>20, 4*capBytes>>20, capBytes>>20)
	if !raceEnabled && grew > capBytes+48<<20 {
		t.Fatalf("peak RSS grew by %d MiB, more than the %d MiB cap plus 48 MiB", grew>>20, capBytes>>20)
	}
	f.Close()
}

// peakRSS returns the process's peak resident set size (VmHWM) in bytes.
func peakRSS(t *testing.T) int64 {
	fd, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	defer fd.Close()
	sc := bufio.NewScanner(fd)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("no VmHWM")
	return 0
}

// TestNoWaitWriteGivesBackReservation: a NOWAIT partial write into a hole
// that gives up (the page would have to be read first) reserved a block
// for delayed allocation; the reservation goes back with the EAGAIN, and
// an inode still holding reservations is not evicted (they live only in
// core). Before, the last close evicted the inode with the reservation, and
// the block was lost to free space for the rest of the mount.
func TestNoWaitWriteGivesBackReservation(t *testing.T) {
	e := newEnv(t, envConfig{})
	fs := e.fs
	f := e.mustCreate("/f", 0)
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	before, err := fs.Statfs()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pwrite(make([]byte, 100), 100, RWFNoWait); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("NOWAIT partial write into a hole: %v, want EAGAIN", err)
	}
	f.in.mu.Lock()
	held := len(f.in.delalloc)
	f.in.mu.Unlock()
	if held != 0 {
		t.Errorf("%d reservations held after the write gave up", held)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	g, err := fs.OpenFile("/f", O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if err := fs.Truncate("/f", 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	after, err := fs.Statfs()
	if err != nil {
		t.Fatal(err)
	}
	if after.BlocksAvail != before.BlocksAvail {
		t.Fatalf("free blocks %d, were %d: a reservation leaked", after.BlocksAvail, before.BlocksAvail)
	}
}

// TestExtendingWriteRaisesSizeBeforeUnlock: a buffered write that extends
// the file raises the size before it unlocks each page it copied into (as
// generic_write_end raises i_size before folio_unlock). Otherwise writeback
// (which locks the page) could write the page back while the size still
// left it past EOF, and a sync point commit its conversion as written with
// the old size: metadata saying written past EOF (fsck's extent-past-eof),
// which the crash campaign met once (classic, a SyncAll racing an extending
// write of an unlinked file).
func TestExtendingWriteRaisesSizeBeforeUnlock(t *testing.T) {
	for _, pol := range []Policy{Classic(), Concurrent()} {
		t.Run(pol.String(), func(t *testing.T) {
			e := policyEnv(t, pol)
			f := e.mustCreate("/f", 0)
			const off, n = 4096 + 100, 3 * 4096
			var bad []string
			e.fs.hooks.pageWritten = func(in *inode, p *pagecache.Page) {
				pageEnd := min(int64(p.Index+1)*4096, off+n)
				if got := in.size(); got < pageEnd {
					bad = append(bad, fmt.Sprintf("page %d unlocked with the size at %d, below %d", p.Index, got, pageEnd))
				}
			}
			defer func() { e.fs.hooks.pageWritten = nil }()
			if _, err := f.WriteAt(pattern(n, 1), off); err != nil {
				t.Fatal(err)
			}
			e.fs.hooks.pageWritten = nil
			if len(bad) > 0 {
				t.Fatal(strings.Join(bad, "; "))
			}
		})
	}
}
