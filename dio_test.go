package sluice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/iolock"
	"github.com/sluicefs/sluice/meta"
)

// The lock rules of the direct-I/O path (seeds 001 and 000), each observed
// deterministically: device requests held at a faultdev gate, the
// device's in-flight maxima, the I/O lock's waiter count, the engine's
// counters.

func policyEnv(t *testing.T, p Policy) *testEnv {
	return newEnv(t, envConfig{opts: Options{Policy: &p}})
}

// prewrite creates path with n bytes of pattern seed, written O_DIRECT and
// fsynced, and returns it open O_DIRECT.
func (e *testEnv) prewrite(path string, n int, seed byte) (*File, []byte) {
	e.t.Helper()
	f := e.mustCreate(path, O_DIRECT)
	data := pattern(n, seed)
	if _, err := f.WriteAt(data, 0); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		e.t.Fatal(err)
	}
	return f, bytes.Clone(data)
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// passGate lets n requests held at g through: all together once all n are
// held, if together (calling whileHeld first, if not nil), else one at a
// time, each as soon as it is the only one held, as when each holds a lock
// the others queue behind. what names the requests in a failure.
func passGate(t *testing.T, g *faultdev.Gate, n int, together bool, what string, whileHeld func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !together {
		for range n {
			if err := g.WaitHeld(ctx, 1); err != nil {
				t.Fatal(err)
			}
			g.Release(1)
		}
		return
	}
	if err := g.WaitHeld(ctx, n); err != nil {
		t.Fatalf("only %d of %d %s reached the device together: %v", g.Held(), n, what, err)
	}
	if whileHeld != nil {
		whileHeld()
	}
	g.Open()
}

func (e *testEnv) inode(f *File) *inode { return f.in }

// TestDirectReadsShareTheLock: N direct reads of one file are all in flight
// at the device at once under the concurrent policy (seed 001), and exactly
// one at a time under classic, where each read takes the lock exclusive and
// drains the reads before it.
func TestDirectReadsShareTheLock(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		pol     Policy
		maxWant int64
	}{{Concurrent(), n}, {Classic(), 1}} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			e := policyEnv(t, tc.pol)
			f, data := e.prewrite("/f", n*4096, 3)
			e.fault.ResetStats()
			g := e.fault.NewGate(faultdev.Reads)
			var wg sync.WaitGroup
			bufs := make([][]byte, n)
			for i := range n {
				bufs[i] = pattern(4096, 0)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := f.ReadAt(bufs[i], int64(i)*4096); err != nil {
						t.Error(err)
					}
				}()
			}
			// One at a time: every other reader is queued on the lock or
			// draining behind the held read.
			passGate(t, g, n, tc.maxWant == n, "reads", nil)
			wg.Wait()
			if got := e.fault.Stats().Read.MaxInFlight; got != tc.maxWant {
				t.Fatalf("max reads in flight = %d, want %d", got, tc.maxWant)
			}
			for i := range n {
				if !bytes.Equal(bufs[i], data[i*4096:(i+1)*4096]) {
					t.Fatalf("read %d returned wrong bytes", i)
				}
			}
			c := e.fs.Counters()
			if tc.pol.SharedDirectReads && c["LockExclDirectRead"] != 0 {
				t.Fatalf("concurrent policy took the lock exclusive for reads: %v", c)
			}
			if !tc.pol.SharedDirectReads && c["LockExclDirectRead"] != n {
				t.Fatalf("classic policy: %d exclusive read locks, want %d", c["LockExclDirectRead"], n)
			}
		})
	}
}

// TestUnalignedOverwritesRunShared: sub-block overwrites of written blocks
// within EOF run concurrently under the shared lock (seed 000's fast path),
// and one at a time under classic; the result equals the model either way.
func TestUnalignedOverwritesRunShared(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		pol     Policy
		maxWant int64
	}{{Concurrent(), n}, {Classic(), 1}} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			e := policyEnv(t, tc.pol)
			f, model := e.prewrite("/f", 16*4096, 5)
			e.fault.ResetStats()
			e.fs.ResetCounters()
			g := e.fault.NewGate(faultdev.Writes)
			var wg sync.WaitGroup
			for i := range n {
				off := int64(i)*4096 + 512 // sector i of block i: sub-block, within EOF
				buf := pattern(512, byte(100+i))
				copy(model[off:], buf)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := f.WriteAt(buf, off); err != nil {
						t.Error(err)
					}
				}()
			}
			passGate(t, g, n, tc.maxWant == n, "sub-block writes", nil)
			wg.Wait()
			g.Open()
			if got := e.fault.Stats().Write.MaxInFlight; got != tc.maxWant {
				t.Fatalf("max writes in flight = %d, want %d", got, tc.maxWant)
			}
			c := e.fs.Counters()
			if tc.pol.OptimisticUnalignedWrites {
				if c["LockSharedUnaligned"] != n || c["LockExclUnaligned"] != 0 {
					t.Fatalf("want %d shared sub-block writes and no exclusive: %v", n, c)
				}
			} else if c["LockExclUnaligned"] != n {
				t.Fatalf("classic: want %d exclusive sub-block writes: %v", n, c)
			}
			if got := mustReadAll(t, f); !bytes.Equal(got, model) {
				t.Fatal("file differs from the model")
			}
		})
	}
}

// TestUnalignedIntoUnwrittenBothSurvive: two sub-block writes into the two
// halves of one unwritten block (or hole) must both survive, over many
// interleavings with delayed completions. Without exclusion and draining
// (the seeds' exclusive route) or the block's range (concurrent), the
// second write's zeroing of the rest of the block would wipe the first's
// bytes (the race the kernel's exclusive route prevents).
func TestUnalignedIntoUnwrittenBothSurvive(t *testing.T) {
	for _, pol := range []Policy{Concurrent(), Seeds(), Classic()} {
		for _, kind := range []string{"unwritten", "hole"} {
			t.Run(pol.String()+"/"+kind, func(t *testing.T) {
				e := policyEnv(t, pol)
				for seed := range uint64(40) {
					e.fault.SetLatency(faultdev.Writes, faultdev.Uniform(0, 300*time.Microsecond, seed))
					name := fmt.Sprintf("/f%d", seed)
					f := e.mustCreate(name, O_DIRECT)
					// 3 blocks; the middle one is the target, the last
					// keeps EOF away so the optimistic route is tried.
					if kind == "unwritten" {
						if err := f.Fallocate(0, 0, 3*4096); err != nil {
							t.Fatal(err)
						}
					} else if err := f.Truncate(3 * 4096); err != nil {
						t.Fatal(err)
					}
					a, b := pattern(2048, byte(seed)), pattern(2048, byte(seed+77))
					var wg sync.WaitGroup
					rng := rand.New(rand.NewPCG(seed, 1))
					order := rng.IntN(2)
					for i := range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							var err error
							if i == order {
								_, err = f.WriteAt(a, 4096)
							} else {
								_, err = f.WriteAt(b, 4096+2048)
							}
							if err != nil {
								t.Error(err)
							}
						}()
					}
					wg.Wait()
					got := mustReadAll(t, f)
					if !bytes.Equal(got[4096:4096+2048], a) || !bytes.Equal(got[4096+2048:8192], b) {
						t.Fatalf("seed %d: a sub-block write into an %s block was lost", seed, kind)
					}
					f.Close()
				}
				e.fault.SetLatency(faultdev.Writes, nil)
				checkClean(t, e.fs)
			})
		}
	}
}

// TestUnalignedSpanningExtentsRetries: under the seeds' policy, a sub-block
// write spanning written and unwritten (or hole) blocks fails the
// overwrite-only attempt with EAGAIN before doing anything, then succeeds
// exclusive. (Under block-range exclusion it takes its blocks' range
// instead: TestRangeWritesOverlapAcrossBlocks.)
func TestUnalignedSpanningExtentsRetries(t *testing.T) {
	for _, kind := range []string{"unwritten", "hole"} {
		t.Run(kind, func(t *testing.T) {
			e := policyEnv(t, Seeds())
			f, model := e.prewrite("/f", 4096, 9)
			if kind == "unwritten" {
				if err := f.Fallocate(0, 4096, 2*4096); err != nil {
					t.Fatal(err)
				}
			} else if err := f.Truncate(3 * 4096); err != nil {
				t.Fatal(err)
			}
			model = append(model, make([]byte, 2*4096)...)
			e.fs.ResetCounters()
			e.fault.ResetStats()
			buf := pattern(2048, 44)
			if _, err := f.WriteAt(buf, 4096-1024); err != nil {
				t.Fatal(err)
			}
			copy(model[4096-1024:], buf)
			c := e.fs.Counters()
			if c["UnalignedEAGAINRetries"] != 1 || c["LockExclUnaligned"] != 1 {
				t.Fatalf("want one EAGAIN retry then one exclusive write: %v", c)
			}
			// Never half-submitted: exactly the exclusive route's two
			// device writes (the written sector run, and the zero-padded
			// unwritten block), nothing from the failed attempt.
			if w := e.fault.Stats().Write.Submitted; w != 2 {
				t.Fatalf("%d device writes, want 2", w)
			}
			if got := mustReadAll(t, f); !bytes.Equal(got, model) {
				t.Fatal("file differs from the model")
			}
		})
	}
}

// TestExtendingWritesRace: extending direct writes in flight together
// (all starting within EOF, so under the shared lock) that complete in
// reverse order of their ends (the largest first) leave size = max end:
// the size never moves backward, and a reader never sees zeros inside the
// published size (conversion precedes the size update). Every write puts
// the same bytes in a given block, so the expected content does not depend
// on the order. The order is exact: the writers start largest first, each
// one's request held at the gate before the next starts, and Gate.Release
// lets the oldest held request through first, one completion at a time.
func TestExtendingWritesRace(t *testing.T) {
	e := policyEnv(t, Concurrent())
	f := e.mustCreate("/f", O_DIRECT)
	const n = 6
	blockData := func(blk int) []byte { return pattern(4096, byte(blk+1)) }
	g := e.fault.NewGate(faultdev.Writes)
	t.Cleanup(g.Open) // on failure, before the file system closes
	in := e.inode(f)
	var wg sync.WaitGroup
	for i := n - 1; i >= 0; i-- { // the largest write first
		buf := pattern((i+1)*4096, 0)
		for b := 0; b <= i; b++ {
			copy(buf[b*4096:], blockData(b))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.WriteAt(buf, 0); err != nil {
				t.Error(err)
			}
		}()
		started := n - i
		waitFor(t, "the writer's request at the gate", func() bool {
			return in.dio.InFlight() == started && g.Held() >= started
		})
	}
	if g.Held() != n {
		t.Fatalf("%d requests held for %d writes: the completion order would not be exact", g.Held(), n)
	}
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	var bad atomic.Value
	go func() {
		defer sampler.Done()
		last := int64(0)
		rd, err := e.fs.OpenFile("/f", O_RDONLY|O_DIRECT, 0)
		if err != nil {
			bad.Store(err.Error())
			return
		}
		defer rd.Close()
		buf := pattern(n*4096, 0)
		for {
			select {
			case <-stop:
				return
			default:
			}
			a, _ := rd.Stat()
			if a.Size < last {
				bad.Store(fmt.Sprintf("size moved backward: %d -> %d", last, a.Size))
				return
			}
			last = a.Size
			m, err := rd.Pread(buf, 0, 0)
			if err != nil {
				bad.Store(err.Error())
				return
			}
			for blk := 0; blk < m/4096; blk++ {
				if !bytes.Equal(buf[blk*4096:(blk+1)*4096], blockData(blk)) {
					bad.Store(fmt.Sprintf("block %d wrong inside published size %d", blk, m))
					return
				}
			}
		}
	}()
	// Complete the writes largest first, each before the next is
	// released; from the first on, the size is the maximum end.
	for left := n - 1; left >= 0; left-- {
		g.Release(1)
		waitFor(t, "the released write to complete", func() bool { return in.dio.InFlight() == left })
		if got := in.size(); got != n*4096 {
			t.Fatalf("size %d after %d of %d completions (largest first), want %d", got, n-left, n, n*4096)
		}
	}
	g.Open()
	wg.Wait()
	close(stop)
	sampler.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	got := mustReadAll(t, f)
	if len(got) != n*4096 {
		t.Fatalf("size %d, want %d", len(got), n*4096)
	}
	for blk := range n {
		if !bytes.Equal(got[blk*4096:(blk+1)*4096], blockData(blk)) {
			t.Fatalf("block %d wrong", blk)
		}
	}
	checkClean(t, e.fs)
}

// TestPastEOFWriteDrains: a write that starts past EOF takes the lock
// exclusive and waits for in-flight direct I/O (which may still move EOF)
// before zeroing the gap; two past-EOF writes are never in flight
// together.
func TestPastEOFWriteDrains(t *testing.T) {
	e := policyEnv(t, Concurrent())
	f := e.mustCreate("/f", O_DIRECT)
	g := e.fault.NewGate(faultdev.Writes)
	e.fault.ResetStats()
	var wg sync.WaitGroup
	write := func(blk int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.WriteAt(pattern(4096, byte(blk)), int64(blk)*4096); err != nil {
				t.Error(err)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The first write (block 2, past EOF 0) reaches the device; the second
	// (block 4, still past EOF: the first has not completed) must wait in
	// the drain instead of joining it.
	write(2)
	if err := g.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	write(4)
	waitFor(t, "the second write to drain", func() bool { return e.fs.counters.Drains.Load() >= 1 })
	if g.Held() != 1 {
		t.Fatalf("%d writes at the device, want 1", g.Held())
	}
	g.Release(1)
	if err := g.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	g.Open()
	wg.Wait()
	if got := e.fault.Stats().Write.MaxInFlight; got != 1 {
		t.Fatalf("%d past-EOF writes in flight together, want 1", got)
	}
	got := mustReadAll(t, f)
	want := make([]byte, 5*4096)
	copy(want[2*4096:], pattern(4096, 2))
	copy(want[4*4096:], pattern(4096, 4))
	if !bytes.Equal(got, want) {
		t.Fatal("gaps do not read as zeros")
	}
}

// TestPastEOFWriteZeroesGap: a sub-block extension leaves the old EOF
// block's tail reading as zeros, and a write past EOF drains and zeroes.
func TestPastEOFWriteZeroesGap(t *testing.T) {
	e := policyEnv(t, Concurrent())
	f := e.mustCreate("/f", O_DIRECT)
	if _, err := f.WriteAt(pattern(1024, 1), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(pattern(512, 2), 8192+512); err != nil {
		t.Fatal(err)
	}
	got := mustReadAll(t, f)
	want := make([]byte, 8192+1024)
	copy(want, pattern(1024, 1))
	copy(want[8192+512:], pattern(512, 2))
	if !bytes.Equal(got, want) {
		t.Fatal("gap does not read as zeros")
	}
}

// TestTruncateDrainsDirectWrites: a truncate waits for every direct write
// in flight before it frees blocks; no completion resurrects the old size,
// and blocks it freed and another file reused never show a late write.
func TestTruncateDrainsDirectWrites(t *testing.T) {
	e := policyEnv(t, Concurrent())
	f, _ := e.prewrite("/f", 8*4096, 1)
	g := e.fault.NewGate(faultdev.Writes)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.WriteAt(pattern(4096, byte(50+i)), int64(4+i)*4096); err != nil {
				t.Error(err)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.WaitHeld(ctx, 4); err != nil {
		t.Fatal(err)
	}
	truncated := make(chan error, 1)
	go func() { truncated <- f.Truncate(4096) }()
	// The truncate holds the lock exclusive and waits in the drain.
	in := e.inode(f)
	waitFor(t, "truncate to start draining", func() bool { return e.fs.counters.Drains.Load() > 0 })
	select {
	case err := <-truncated:
		t.Fatalf("truncate returned (%v) with direct writes in flight", err)
	default:
	}
	if in.dio.InFlight() != 4 {
		t.Fatalf("in flight %d, want 4", in.dio.InFlight())
	}
	g.Open()
	if err := <-truncated; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	a, _ := f.Stat()
	if a.Size != 4096 {
		t.Fatalf("size %d after truncate, want 4096 (a completion resurrected it?)", a.Size)
	}
	// Reuse the freed blocks in another file; its data must stay intact.
	if err := e.fs.SyncAll(); err != nil { // frees become allocatable
		t.Fatal(err)
	}
	f2, data2 := e.prewrite("/g", 7*4096, 9)
	if got := mustReadAll(t, f2); !bytes.Equal(got, data2) {
		t.Fatal("the file reusing freed blocks was corrupted")
	}
	checkClean(t, e.fs)
}

// TestAppendersNeverOverlap: concurrent O_APPEND writers each get their
// own region.
func TestAppendersNeverOverlap(t *testing.T) {
	for _, direct := range []bool{false, true} {
		e := policyEnv(t, Concurrent())
		flags := O_APPEND
		if direct {
			flags |= O_DIRECT
		}
		f := e.mustCreate("/log", flags)
		const writers, records = 4, 25
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range records {
					rec := pattern(512, byte(w*records+r+1))
					if _, err := f.Write(rec); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		got := mustReadAll(t, f)
		if len(got) != writers*records*512 {
			t.Fatalf("direct=%v: size %d, want %d", direct, len(got), writers*records*512)
		}
		seen := map[byte]bool{}
		for i := 0; i < len(got); i += 512 {
			id := got[i] // pattern byte 0 is the seed
			if !bytes.Equal(got[i:i+512], pattern(512, id)) || seen[id] {
				t.Fatalf("direct=%v: record at %d is torn or duplicated", direct, i)
			}
			seen[id] = true
		}
	}
}

// TestNoWaitMatrix: every would-block case returns EAGAIN to a NOWAIT
// caller and leaves no trace (no size change, no allocation, no write).
func TestNoWaitMatrix(t *testing.T) {
	for _, pol := range []Policy{Seeds(), Concurrent()} {
		t.Run(pol.String(), func(t *testing.T) { testNoWaitMatrix(t, pol) })
	}
}

func testNoWaitMatrix(t *testing.T, pol Policy) {
	e := policyEnv(t, pol)
	f, _ := e.prewrite("/f", 4*4096, 1)
	in := e.inode(f)
	expectEAGAIN := func(what string, fn func() (int, error)) {
		t.Helper()
		size := in.size()
		allocated := e.fs.counters.BlocksAllocated.Load()
		writes := e.fault.Stats().Write.Submitted
		eagains := e.fs.counters.NoWaitEAGAIN.Load()
		n, err := fn()
		if !errors.Is(err, syscall.EAGAIN) || n != 0 {
			t.Fatalf("%s: got %d, %v; want EAGAIN", what, n, err)
		}
		// Each NOWAIT EAGAIN is counted exactly once (FS.nowaitEAGAIN).
		if got := e.fs.counters.NoWaitEAGAIN.Load() - eagains; got != 1 {
			t.Fatalf("%s: NoWaitEAGAIN moved by %d, want 1", what, got)
		}
		if in.size() != size || e.fs.counters.BlocksAllocated.Load() != allocated || e.fault.Stats().Write.Submitted != writes {
			t.Fatalf("%s: EAGAIN left a trace", what)
		}
	}
	buf := pattern(4096, 7)
	expectEAGAIN("allocating write", func() (int, error) { return f.Pwrite(buf, 8*4096, RWFNoWait) })
	expectEAGAIN("write past EOF", func() (int, error) { return f.Pwrite(buf, 6*4096, RWFNoWait) })
	expectEAGAIN("extending sub-block write", func() (int, error) { return f.Pwrite(buf[:1024], 4*4096-512, RWFNoWait) })
	if err := f.Fallocate(FallocKeepSize, 4*4096, 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(6 * 4096); err != nil {
		t.Fatal(err)
	}
	if pol.BlockRangeExclusion {
		// Under block ranges a sub-block write into an unwritten block
		// blocks only on its range, when someone holds it.
		r := in.ranges.Lock(4, 1)
		expectEAGAIN("sub-block write into unwritten, its block range held", func() (int, error) { return f.Pwrite(buf[:512], 4*4096, RWFNoWait) })
		in.ranges.Unlock(r)
		if n, err := f.Pwrite(buf[:512], 4*4096, RWFNoWait); err != nil || n != 512 {
			t.Fatalf("NOWAIT sub-block write into unwritten, range free: %d, %v", n, err)
		}
	} else {
		expectEAGAIN("sub-block write into unwritten", func() (int, error) { return f.Pwrite(buf[:512], 4*4096, RWFNoWait) })
	}
	expectEAGAIN("sub-block write into a hole", func() (int, error) { return f.Pwrite(buf[:512], 5*4096, RWFNoWait) })
	// Lock held exclusive by someone else.
	in.io.Lock(iolock.Exclusive)
	expectEAGAIN("read under an exclusive holder", func() (int, error) { return f.Pread(buf, 0, RWFNoWait) })
	expectEAGAIN("write under an exclusive holder", func() (int, error) { return f.Pwrite(buf, 0, RWFNoWait) })
	in.io.Unlock(iolock.Exclusive)
	// Dirty cached pages in the range of a direct read.
	bf, err := e.fs.OpenFile("/f", O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	if _, err := bf.WriteAt(buf[:100], 10); err != nil {
		t.Fatal(err)
	}
	expectEAGAIN("direct read over dirty pages", func() (int, error) { return f.Pread(buf, 0, RWFNoWait) })
	// A buffered write that needs a read of its page first.
	expectEAGAIN("buffered partial write of an uncached page", func() (int, error) { return bf.Pwrite(buf[:100], 2*4096+10, RWFNoWait) })
	expectEAGAIN("buffered O_DSYNC write", func() (int, error) { return bf.Pwrite(buf[:100], 10, RWFNoWait|RWFDsync) })
	// Cached pages in the range of a direct write (their invalidation
	// could wait for a page lock): EAGAIN.
	expectEAGAIN("direct write over cached pages", func() (int, error) { return f.Pwrite(buf, 2*4096, RWFNoWait) })
	// The aligned overwrite within EOF of an uncached range does not block.
	if n, err := f.Pwrite(buf, 3*4096, RWFNoWait); err != nil || n != 4096 {
		t.Fatalf("NOWAIT overwrite: %d, %v", n, err)
	}
}

// TestDeviceCountersAreTheDevices: every device request the engine makes
// goes through its one counting handle (FS.dev), so the engine's device
// counters equal what the device itself saw, for direct, buffered,
// writeback, read-back and flush traffic alike.
func TestDeviceCountersAreTheDevices(t *testing.T) {
	e := newEnv(t, envConfig{ioUnit: 512})
	e.fs.ResetCounters()
	e.fault.ResetStats()
	f, _ := e.prewrite("/d", 8*4096, 1)
	if _, err := f.WriteAt(pattern(512, 2), 4096+512); err != nil { // sub-block direct
		t.Fatal(err)
	}
	mustReadAll(t, f)
	b := e.mustCreate("/b", 0)
	if _, err := b.WriteAt(pattern(3*4096+100, 3), 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Fsync(); err != nil {
		t.Fatal(err)
	}
	g, err := e.fs.OpenFile("/d", O_RDWR, 0) // buffered: partial page reads
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt(pattern(100, 4), 2*4096+10); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	c, s := e.fs.Counters(), e.fault.Stats()
	if c["DeviceReads"] != s.Read.Submitted || c["DeviceWrites"] != s.Write.Submitted || c["DeviceFlushes"] != s.Flush.Submitted {
		t.Fatalf("engine counted %d reads, %d writes, %d flushes; the device saw %d, %d, %d",
			c["DeviceReads"], c["DeviceWrites"], c["DeviceFlushes"], s.Read.Submitted, s.Write.Submitted, s.Flush.Submitted)
	}
	if s.Read.Submitted == 0 || s.Write.Submitted == 0 || s.Flush.Submitted == 0 {
		t.Fatalf("the test made no reads, writes or flushes: %+v", s)
	}
	if c["DeviceInFlight"] != 0 {
		t.Fatalf("DeviceInFlight = %d with nothing in flight", c["DeviceInFlight"])
	}
}

// persistedState returns the state the metadata records for file block blk
// of in (Unwritten for a hole, too).
func persistedState(t *testing.T, e *testEnv, in *inode, blk uint64) meta.ExtentState {
	t.Helper()
	state := meta.Unwritten
	start, end := meta.ExtentPrefix(in.ino)
	err := e.fs.kv.Scan(start, end, func(k, v []byte) error {
		_, x, err := meta.DecodeExtent(k, v)
		if err == nil && x.FileBlock <= blk && blk < x.FileBlock+x.Len {
			state = x.State
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// TestConversionWaitsForSyncPoint: a direct write and a writeback into
// unwritten blocks both convert them through convertWritten: written in
// core at completion (reads see the data), recorded as written only by the
// next sync point, after the device flush that made the data durable.
func TestConversionWaitsForSyncPoint(t *testing.T) {
	for _, how := range []string{"direct", "writeback"} {
		t.Run(how, func(t *testing.T) {
			e := policyEnv(t, Concurrent())
			f := e.mustCreate("/f", O_DIRECT)
			if err := f.Fallocate(0, 0, 2*4096); err != nil {
				t.Fatal(err)
			}
			if err := e.fs.SyncAll(); err != nil {
				t.Fatal(err)
			}
			in := e.inode(f)
			data := pattern(4096, 7)
			if how == "direct" {
				if _, err := f.WriteAt(data, 4096); err != nil {
					t.Fatal(err)
				}
			} else {
				b, err := e.fs.OpenFile("/f", O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				if _, err := b.WriteAt(data, 4096); err != nil {
					t.Fatal(err)
				}
				if err := in.writeback(4096, 8192, true); err != nil {
					t.Fatal(err)
				}
			}
			flushes := e.fault.Stats().Flush.Submitted
			if got := mustReadAll(t, f); !bytes.Equal(got[4096:], data) {
				t.Fatal("the converted block does not read as the data")
			}
			if s := persistedState(t, e, in, 1); s != meta.Unwritten {
				t.Fatalf("block 1 recorded %v before a sync point", s)
			}
			if err := e.fs.SyncAll(); err != nil {
				t.Fatal(err)
			}
			if e.fault.Stats().Flush.Submitted == flushes {
				t.Fatal("the sync point did not flush the device")
			}
			if s := persistedState(t, e, in, 1); s != meta.Written {
				t.Fatalf("block 1 recorded %v after the sync point", s)
			}
			if s := persistedState(t, e, in, 0); s != meta.Unwritten {
				t.Fatalf("block 0 (never written) recorded %v", s)
			}
		})
	}
}
