package reliability

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
)

// Part 3: a full device. Goroutines fill a small volume until ENOSPC.

// fillResult is what one fill round did.
type fillResult struct {
	files  []string
	enospc int // calls that failed with ENOSPC
}

// fill runs writers goroutines that create files and fill them until the
// device is full: direct writes, fallocate, buffered writes followed by
// fsync, and extensions of a shared file. On ENOSPC a writer halves its
// request size, down to one block, so the volume ends up full. Every error must be ENOSPC. Buffered files whose
// fsync failed are unlinked (their dirty pages can never be written).
func fill(t *testing.T, e *env, round int, writers int, seed uint64) fillResult {
	t.Helper()
	var mu sync.Mutex
	var res fillResult
	var wg sync.WaitGroup
	shared := fmt.Sprintf("/shared%d", round)
	sf := e.create(shared, sluice.O_DIRECT)
	defer sf.Close()
	res.files = append(res.files, shared)
	var sharedOff struct {
		sync.Mutex
		next int64
	}
	var broken atomic.Bool
	fail := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("round %d: %s: %v, want ENOSPC", round, what, err)
			broken.Store(true)
		}
		mu.Lock()
		res.enospc++
		mu.Unlock()
	}
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			size := int64(64<<10) << rng.IntN(3)
			for i := 0; size >= 4096 && !broken.Load(); i++ {
				kind := (g + i) % 4
				name := fmt.Sprintf("/r%d-g%d-%d", round, g, i)
				var err error
				switch kind {
				case 0: // direct write of a new file
					f, cerr := e.fs.OpenFile(name, sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECT, 0o644)
					if cerr != nil {
						fail("create", cerr)
						return
					}
					_, err = f.WriteAt(pattern(int(size), rng.Uint64()), 0)
					f.Close()
				case 1: // fallocate a new file
					f, cerr := e.fs.OpenFile(name, sluice.O_RDWR|sluice.O_CREAT, 0o644)
					if cerr != nil {
						fail("create", cerr)
						return
					}
					err = f.Fallocate(0, 0, size)
					f.Close()
				case 2: // buffered write + fsync
					f, cerr := e.fs.OpenFile(name, sluice.O_RDWR|sluice.O_CREAT, 0o644)
					if cerr != nil {
						fail("create", cerr)
						return
					}
					if _, err = f.WriteAt(pattern(int(size), rng.Uint64()), 0); err == nil {
						err = f.Fsync()
					}
					f.Close()
					if err != nil {
						// The data cannot be written: give it up.
						if uerr := e.fs.Unlink(name); uerr != nil {
							t.Errorf("unlink %s: %v", name, uerr)
						}
						name = ""
					}
				case 3: // extend the shared file (direct, appending region)
					sharedOff.Lock()
					off := sharedOff.next
					sharedOff.next += size
					sharedOff.Unlock()
					_, err = sf.WriteAt(pattern(int(size), rng.Uint64()), off)
					name = ""
				}
				if name != "" {
					mu.Lock()
					res.files = append(res.files, name)
					mu.Unlock()
				}
				if err != nil {
					fail(fmt.Sprintf("kind %d of %d bytes", kind, size), err)
					size /= 2
				}
			}
		}()
	}
	if !withTimeout(t, 60*time.Second, fmt.Sprintf("fill round %d", round), wg.Wait) {
		t.FailNow()
	}
	return res
}

// checkSpace checks that statfs and Check agree: free + used = total, and
// the blocks the files report add up to the used blocks.
func checkSpace(t *testing.T, e *env) (used uint64, st sluice.Statfs) {
	t.Helper()
	r := checkClean(t, e.fs)
	st, err := e.fs.Statfs()
	if err != nil {
		t.Fatal(err)
	}
	if st.BlocksFree+r.UsedBlocks != st.Blocks || r.FreeBlocks != st.BlocksFree {
		t.Errorf("statfs free %d + used %d != total %d (Check: free %d, used %d)", st.BlocksFree, r.UsedBlocks, st.Blocks, r.FreeBlocks, r.UsedBlocks)
	}
	return r.UsedBlocks, st
}

// TestFullDevice fills a 8 MiB volume from 8 goroutines through direct
// writes, fallocate, buffered writes (+fsync) and a shared file: every
// failure is ENOSPC, nothing hangs, nothing half-allocated stays (Check
// clean, statfs consistent), a fallocated range and written blocks can
// still be written when the device is full, deleting everything makes the
// space reusable (a second fill gets as far), and a crash image after
// fsync is consistent.
func TestFullDevice(t *testing.T) {
	e := newEnv(t, envConfig{size: 8 << 20})
	// A preallocated file: writes into it must not need new space.
	pre := e.create("/prealloc", 0)
	defer pre.Close()
	if err := pre.Fallocate(0, 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	over := e.create("/overwrite", sluice.O_DIRECT)
	defer over.Close()
	if _, err := over.WriteAt(pattern(64<<10, 1), 0); err != nil {
		t.Fatal(err)
	}
	_, st0 := checkSpace(t, e)

	r1 := fill(t, e, 1, 8, 1)
	if r1.enospc == 0 {
		t.Fatal("no call failed with ENOSPC: the device never filled")
	}
	used1, st := checkSpace(t, e)
	if st.BlocksFree > st.Blocks/50 {
		t.Errorf("after filling, %d of %d blocks are still free", st.BlocksFree, st.Blocks)
	}
	t.Logf("round 1: %d files, %d ENOSPC, %d blocks used, %d free", len(r1.files), r1.enospc, used1, st.BlocksFree)

	// Full, yet writes into allocated space work.
	if _, err := pre.WriteAt(pattern(64<<10, 2), 0); err != nil {
		t.Errorf("buffered write into a fallocated range of a full device: %v", err)
	}
	if err := pre.Fsync(); err != nil {
		t.Errorf("fsync of a fallocated range of a full device: %v", err)
	}
	if _, err := over.WriteAt(pattern(32<<10, 3), 16<<10); err != nil {
		t.Errorf("direct overwrite on a full device: %v", err)
	}
	if err := over.Fsync(); err != nil {
		t.Errorf("fsync of an overwrite on a full device: %v", err)
	}
	// A new allocation fails cleanly and changes nothing (but the times:
	// Linux updates mtime and ctime before it allocates, and so does
	// sluice).
	before := snapshot(t, e.fs).withoutTimes()
	f := e.open("/overwrite", sluice.O_RDWR|sluice.O_DIRECT)
	if _, err := f.WriteAt(pattern(64<<10, 4), 1<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("direct write past the end of a full device: %v, want ENOSPC", err)
	}
	if err := f.Fallocate(0, 1<<20, 1<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("fallocate on a full device: %v, want ENOSPC", err)
	}
	f.Close()
	if d := before.diff(snapshot(t, e.fs).withoutTimes()); d != "" {
		t.Errorf("failed allocations changed the tree: %s", d)
	}

	// Delete everything of the round; the space comes back.
	for _, p := range r1.files {
		if err := e.fs.Unlink(p); err != nil {
			t.Errorf("unlink %s: %v", p, err)
		}
	}
	for range 2 { // the second sync makes the freed blocks allocatable
		if err := e.fs.SyncAll(); err != nil {
			t.Fatal(err)
		}
	}
	_, st = checkSpace(t, e)
	if st.BlocksFree != st0.BlocksFree {
		t.Errorf("after deleting every file of the fill, %d blocks free, %d before it", st.BlocksFree, st0.BlocksFree)
	}

	r2 := fill(t, e, 2, 8, 2)
	used2, _ := checkSpace(t, e)
	t.Logf("round 2: %d files, %d ENOSPC, %d blocks used", len(r2.files), r2.enospc, used2)
	if used2 < used1*95/100 || used2 > used1*105/100 {
		t.Errorf("second fill used %d blocks, the first %d", used2, used1)
	}

	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	for seed := uint64(1); seed <= 2; seed++ {
		e2 := e.crash(seed)
		checkSpace(t, e2)
		e2.abandon()
	}
}

// TestFullDeviceBufferedWrites: buffered writes alone fill the device.
// The write that finds no space fails with ENOSPC in bounded time (as XFS
// and ext4 do with their delayed-allocation reservation), and afterwards
// the volume is consistent.
func TestFullDeviceBufferedWrites(t *testing.T) {
	e := newEnv(t, envConfig{size: 4 << 20, opts: sluice.Options{CacheSizeBytes: 2 << 20}})
	f := e.create("/a", 0)
	buf := pattern(64<<10, 1)
	var off int64
	var err error
	if !withTimeout(t, 30*time.Second, "buffered writes to a full device", func() {
		for off < 64<<20 {
			if _, err = f.WriteAt(buf, off); err != nil {
				return
			}
			off += int64(len(buf))
		}
	}) {
		return
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("buffered writes of %d bytes to a 4 MiB device: %v, want ENOSPC", off, err)
	}
	if err := f.Fsync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("fsync: %v", err)
	}
	if err := f.Truncate(off / 2); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		t.Errorf("fsync after truncating to half: %v", err)
	}
	f.Close()
	checkSpace(t, e)
}
