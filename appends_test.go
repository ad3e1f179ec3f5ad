package sluice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/meta"
)

// The rules of parallel appends (Policy.ParallelAppends, appends.go), each
// observed deterministically: device writes held at gates, one gate per
// append where the order of completions matters, the published size, the
// file's bytes and the engine's counters.

// record is the n-byte record number i: its pattern starts with byte i+1.
func record(n, i int) []byte { return pattern(n, byte(i+1)) }

// recordsOf checks that data is whole n-byte records, each the record of
// its number, and returns the numbers in file order (-1 for a zero
// record).
func recordsOf(t *testing.T, data []byte, n int) []int {
	t.Helper()
	if len(data)%n != 0 {
		t.Fatalf("size %d is not a whole number of %d-byte records", len(data), n)
	}
	var out []int
	for off := 0; off < len(data); off += n {
		rec := data[off : off+n]
		if bytes.Equal(rec, make([]byte, n)) {
			out = append(out, -1)
			continue
		}
		id := int(rec[0]) - 1
		if !bytes.Equal(rec, record(n, id)) {
			t.Fatalf("record at %d is torn or foreign", off)
		}
		out = append(out, id)
	}
	return out
}

// eachOnce checks that ids (recordsOf's) are n records, none of them zero
// and none twice.
func eachOnce(t *testing.T, ids []int, n int) {
	t.Helper()
	seen := map[int]bool{}
	for _, id := range ids {
		if id < 0 || seen[id] {
			t.Fatalf("records %v: a zero or duplicated record", ids)
		}
		seen[id] = true
	}
	if len(ids) != n {
		t.Fatalf("%d records, want %d", len(ids), n)
	}
}

// devOffsetOf returns the device offset of file byte off, which must be
// mapped.
func (e *testEnv) devOffsetOf(f *File, off int64) int64 {
	e.t.Helper()
	in := f.in
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil {
		e.t.Fatal(err)
	}
	fb := uint64(off / e.fs.blockSize)
	s := m.Lookup(fb, 1, nil)[0]
	if s.Hole {
		e.t.Fatalf("file byte %d is not mapped", off)
	}
	return e.fs.devOffset(s, off)
}

// heldCtx is a context for a gate's WaitHeld.
func heldCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestParallelAppendsInFlight: N direct appenders of one file all have
// their writes at the device at once under the concurrent policy, and one
// at a time under the seeds' (each holds the lock exclusive until its size
// is published); the file is every record exactly once either way.
func TestParallelAppendsInFlight(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		pol     Policy
		maxWant int64
	}{{Concurrent(), n}, {Seeds(), 1}} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			e := policyEnv(t, tc.pol)
			f := e.mustCreate("/log", O_DIRECT|O_APPEND)
			e.fault.ResetStats()
			g := e.fault.NewGate(faultdev.Writes)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Pwrite: Write holds the file position's lock, as
					// write(2) holds f_pos_lock, across the whole write.
					if _, err := f.Pwrite(record(4096, i), 0, RWFAppend); err != nil {
						t.Error(err)
					}
				}()
			}
			passGate(t, g, n, tc.maxWant == n, "appends", func() {
				if sz := f.in.size(); sz != 0 {
					t.Fatalf("size %d published with every append in flight", sz)
				}
			})
			wg.Wait()
			if got := e.fault.Stats().Write.MaxInFlight; got != tc.maxWant {
				t.Fatalf("max writes in flight = %d, want %d", got, tc.maxWant)
			}
			eachOnce(t, recordsOf(t, mustReadAll(t, f), 4096), n)
			checkClean(t, e.fs)
		})
	}
}

// appendGates starts n direct appends of 4 KiB records to f, one after the
// other, each held at a gate of its own (f's blocks are preallocated, so
// each record's device offset is known), and returns the gates and the
// appenders' results in reservation order: append i is at i*4096 of a file
// that was empty.
func appendGates(t *testing.T, e *testEnv, f *File, n int) ([]*faultdev.Gate, []chan error) {
	t.Helper()
	if err := f.Fallocate(FallocKeepSize, 0, int64(n)*4096); err != nil {
		t.Fatal(err)
	}
	gates := make([]*faultdev.Gate, n)
	res := make([]chan error, n)
	for i := range n {
		dev := e.devOffsetOf(f, int64(i)*4096)
		gates[i] = e.fault.NewGate(faultdev.And(faultdev.Writes, faultdev.Range{Off: dev, Len: 4096}))
	}
	for i := range n {
		res[i] = make(chan error, 1)
		go func() {
			_, err := f.Pwrite(record(4096, i), 0, RWFAppend)
			res[i] <- err
		}()
		if err := gates[i].WaitHeld(heldCtx(t), 1); err != nil {
			t.Fatalf("append %d never reached its gate: %v", i, err)
		}
	}
	return gates, res
}

// returned reports whether the append behind ch has returned (without
// waiting), keeping its result for a later read.
func returned(ch chan error) (bool, error) {
	select {
	case err := <-ch:
		ch <- err
		return true, err
	default:
		return false, nil
	}
}

// TestAppendsPublishInOrder: appends whose writes complete out of order
// publish the size only over the completed appends at the head of the
// reservation order; an append returns only once it is published; a reader
// never sees zeros inside the size (the preallocated blocks' conversion is
// published with the size).
func TestAppendsPublishInOrder(t *testing.T) {
	e := policyEnv(t, Concurrent())
	f := e.mustCreate("/log", O_DIRECT|O_APPEND)
	r, err := e.fs.OpenFile("/log", O_RDONLY|O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	gates, res := appendGates(t, e, f, n)
	e.fs.ResetCounters()
	check := func(step string, wantSize int64, wantReturned []bool) {
		t.Helper()
		for i, want := range wantReturned {
			if want {
				if err := <-res[i]; err != nil {
					t.Fatalf("%s: append %d: %v", step, i, err)
				}
				res[i] <- nil
			} else if done, _ := returned(res[i]); done {
				t.Fatalf("%s: append %d returned before its range was published", step, i)
			}
		}
		if sz := f.in.size(); sz != wantSize {
			t.Fatalf("%s: size %d, want %d", step, sz, wantSize)
		}
		got := mustReadAll(t, r)
		ids := recordsOf(t, got, 4096)
		for i, id := range ids {
			if id != i {
				t.Fatalf("%s: records %v inside the size, want 0..%d in order", step, ids, len(ids)-1)
			}
		}
	}
	// The last reservation completes first, then the second: nothing is
	// published while the first is in flight.
	gates[3].Open()
	waitFor(t, "append 3's completion", func() bool { return e.fs.counters.AppendPublishWaits.Load() == 1 })
	check("3 done", 0, []bool{false, false, false, false})
	gates[1].Open()
	waitFor(t, "append 1's completion", func() bool { return e.fs.counters.AppendPublishWaits.Load() == 2 })
	check("1 and 3 done", 0, []bool{false, false, false, false})
	// The first completes: the first two are published together; the
	// fourth still waits for the third.
	gates[0].Open()
	check("0, 1 and 3 done", 2*4096, []bool{true, true, false, false})
	gates[2].Open()
	check("all done", 4*4096, []bool{true, true, true, true})
	if c := e.fs.Counters(); c["LockExclDirectWrite"] != 0 || c["Drains"] != 0 {
		t.Fatalf("appends took the exclusive lock or drained: %v", c)
	}
	checkClean(t, e.fs)
	// Durable once synced: the conversions and the size.
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	e2 := e.crash(1)
	g, err := e2.fs.OpenFile("/log", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ids := recordsOf(t, mustReadAll(t, g), 4096); fmt.Sprint(ids) != "[0 1 2 3]" {
		t.Fatalf("after a crash following fsync: records %v", ids)
	}
	checkClean(t, e2.fs)
}

// TestAppendFailureRule: an append that fails with later appends reserved
// after it (and succeeding) is published as zeros with them; one that fails
// with nothing after it, and failed appends left at the tail by a later
// failure, are given back, and the size never covers them.
func TestAppendFailureRule(t *testing.T) {
	t.Run("middle", func(t *testing.T) {
		e := policyEnv(t, Concurrent())
		f := e.mustCreate("/log", O_DIRECT|O_APPEND)
		if err := f.Fallocate(FallocKeepSize, 0, 3*4096); err != nil {
			t.Fatal(err)
		}
		// Append 1's write fails once its gate opens, with append 2
		// already reserved after it.
		inj := e.fault.Inject(&faultdev.Fault{When: faultdev.And(faultdev.Writes, faultdev.Range{Off: e.devOffsetOf(f, 4096), Len: 4096}), AfterIO: true})
		defer inj.Remove()
		gates, res := appendGates(t, e, f, 3)
		gates[1].Open()
		waitFor(t, "append 1's failure", func() bool { return e.fs.counters.AppendPublishWaits.Load() == 1 })
		gates[2].Open()
		gates[0].Open()
		for i, want := range []error{nil, syscall.EIO, nil} {
			if err := <-res[i]; !errors.Is(err, want) && !(want == nil && err == nil) {
				t.Fatalf("append %d: %v, want %v", i, err, want)
			}
		}
		if ids := recordsOf(t, mustReadAll(t, f), 4096); fmt.Sprint(ids) != "[0 -1 2]" {
			t.Fatalf("records %v, want [0 -1 2] (the failed one zeros)", ids)
		}
		if c := e.fs.Counters(); c["AppendsZeroed"] != 1 || c["AppendsReleased"] != 0 {
			t.Fatalf("counters %v", c)
		}
		checkClean(t, e.fs)
	})
	t.Run("tail", func(t *testing.T) {
		e := policyEnv(t, Concurrent())
		f := e.mustCreate("/log", O_DIRECT|O_APPEND)
		if err := f.Fallocate(FallocKeepSize, 0, 3*4096); err != nil {
			t.Fatal(err)
		}
		// Appends 1 and 2 fail; 1 fails first, with 2 after it, then 2
		// fails with nothing after it: both are given back.
		inj := e.fault.Inject(&faultdev.Fault{When: faultdev.And(faultdev.Writes, faultdev.Range{Off: e.devOffsetOf(f, 4096), Len: 2 * 4096}), AfterIO: true})
		defer inj.Remove()
		gates, res := appendGates(t, e, f, 3)
		gates[1].Open()
		waitFor(t, "append 1's failure", func() bool { return e.fs.counters.AppendPublishWaits.Load() == 1 })
		gates[2].Open()
		gates[0].Open()
		for i, want := range []error{nil, syscall.EIO, syscall.EIO} {
			if err := <-res[i]; !errors.Is(err, want) && !(want == nil && err == nil) {
				t.Fatalf("append %d: %v, want %v", i, err, want)
			}
		}
		if ids := recordsOf(t, mustReadAll(t, f), 4096); fmt.Sprint(ids) != "[0]" {
			t.Fatalf("records %v, want [0]", ids)
		}
		if c := e.fs.Counters(); c["AppendsReleased"] != 2 || c["AppendsZeroed"] != 0 {
			t.Fatalf("counters %v", c)
		}
		// The next append goes where the failed ones were.
		inj.Remove()
		if _, err := f.Write(record(4096, 9)); err != nil {
			t.Fatal(err)
		}
		if ids := recordsOf(t, mustReadAll(t, f), 4096); fmt.Sprint(ids) != "[0 9]" {
			t.Fatalf("records %v, want [0 9]", ids)
		}
		checkClean(t, e.fs)
	})
}

// TestSubBlockAppendsShareBlocks: 2 KiB direct appends, two to a block:
// appends into different blocks are in flight together, two into one block
// never (the second waits for the first's publication, then finds the
// block written and writes its half in place); the file is every record in
// reservation order.
func TestSubBlockAppendsShareBlocks(t *testing.T) {
	e := policyEnv(t, Concurrent())
	f := e.mustCreate("/log", O_DIRECT|O_APPEND)
	const n = 8
	e.fault.ResetStats()
	g := e.fault.NewGate(faultdev.Writes)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.Pwrite(record(2048, i), 0, RWFAppend); err != nil {
				t.Error(err)
			}
		}()
	}
	// The first append of each of the 4 blocks reaches the device; the
	// second of each waits for the block's range.
	if err := g.WaitHeld(heldCtx(t), n/2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second appends to queue on their blocks", func() bool {
		_, waiting := f.in.ranges.Len()
		return waiting == n/2
	})
	g.Open()
	wg.Wait()
	if got := e.fault.Stats().Write.MaxInFlight; got != n/2 {
		t.Fatalf("max writes in flight %d, want %d (one per block)", got, n/2)
	}
	eachOnce(t, recordsOf(t, mustReadAll(t, f), 2048), n)
	checkClean(t, e.fs)
}

// TestBufferedAppendsParallel: buffered appenders run under the shared
// lock, while a reader checks that the file inside its size is always
// whole records; mixed with direct appenders to the same file. Every
// record is there exactly once, in a crash image after fsync too.
func TestBufferedAppendsParallel(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("mixed=%v", mixed), func(t *testing.T) {
			e := policyEnv(t, Concurrent())
			bf := e.mustCreate("/log", O_APPEND)
			df, err := e.fs.OpenFile("/log", O_RDWR|O_APPEND|O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			const writers, each, size = 4, 40, 1024
			e.fs.ResetCounters()
			var wg sync.WaitGroup
			stop := make(chan struct{})
			readerDone := make(chan struct{})
			go func() {
				defer close(readerDone)
				rf, err := e.fs.OpenFile("/log", O_RDONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				defer rf.Close()
				for {
					select {
					case <-stop:
						return
					default:
					}
					data := mustReadAll(t, rf)
					data = data[:len(data)/size*size] // a read races the size
					for off := 0; off < len(data); off += size {
						rec := data[off : off+size]
						if !bytes.Equal(rec, record(size, int(rec[0])-1)) {
							t.Errorf("a reader saw a torn or zero record at %d", off)
							return
						}
					}
				}
			}()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					f := bf
					if mixed && w%2 == 1 {
						f = df
					}
					for j := range each {
						if _, err := f.Pwrite(record(size, w*each+j), 0, RWFAppend); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(stop)
			<-readerDone
			c := e.fs.Counters()
			if c["LockExclBuffered"] != 0 || c["LockSharedAppend"] != writers*each {
				t.Fatalf("counters %v: want every append shared", c)
			}
			check := func(f *File) {
				t.Helper()
				eachOnce(t, recordsOf(t, mustReadAll(t, f), size), writers*each)
			}
			check(bf)
			if err := bf.Fsync(); err != nil {
				t.Fatal(err)
			}
			checkClean(t, e.fs)
			e2 := e.crash(7)
			g, err := e2.fs.OpenFile("/log", O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			check(g)
			checkClean(t, e2.fs)
		})
	}
}

// TestAppendWritebackBeforePublication: writeback of a buffered append's
// page before the append is published (an earlier direct append is still
// in flight) leaves the block unwritten in core and in the metadata, so
// the metadata never says written past the size (fsck, a crash); the
// publication converts it.
func TestAppendWritebackBeforePublication(t *testing.T) {
	e := policyEnv(t, Concurrent())
	df := e.mustCreate("/log", O_DIRECT|O_APPEND)
	bf, err := e.fs.OpenFile("/log", O_RDWR|O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := df.Fallocate(FallocKeepSize, 0, 4096); err != nil {
		t.Fatal(err)
	}
	g := e.fault.NewGate(faultdev.And(faultdev.Writes, faultdev.Range{Off: e.devOffsetOf(df, 0), Len: 4096}))
	dres := make(chan error, 1)
	go func() { _, err := df.Write(record(4096, 0)); dres <- err }()
	if err := g.WaitHeld(heldCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	bres := make(chan error, 1)
	go func() { _, err := bf.Write(record(4096, 1)); bres <- err }()
	waitFor(t, "the buffered append to wait for publication", func() bool { return e.fs.counters.AppendPublishWaits.Load() == 1 })
	in := bf.in
	if err := in.writeback(4096, 8192, true); err != nil {
		t.Fatal(err)
	}
	if e.fs.counters.AppendConvDeferred.Load() != 1 {
		t.Fatalf("writeback's conversion past EOF was not deferred: %v", e.fs.Counters())
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	if st := persistedState(t, e, in, 1); st != meta.Unwritten {
		t.Fatalf("block 1 persisted %v while past the size", st)
	}
	checkClean(t, e.fs)
	g.Open()
	if err := <-dres; err != nil {
		t.Fatal(err)
	}
	if err := <-bres; err != nil {
		t.Fatal(err)
	}
	// Drop the cache: the bytes come from the device, through the
	// converted extent.
	if err := in.invalidateRange(0, 8192); err != nil {
		t.Fatal(err)
	}
	if ids := recordsOf(t, mustReadAll(t, bf), 4096); fmt.Sprint(ids) != "[0 1]" {
		t.Fatalf("records %v", ids)
	}
	if err := bf.Fsync(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, e.fs)
}

// TestAppendNoWait: a NOWAIT direct append runs inline only into
// preallocated blocks that nobody else holds; otherwise EAGAIN with no
// trace (no reservation, no size change, no write).
func TestAppendNoWait(t *testing.T) {
	e := policyEnv(t, Concurrent())
	f := e.mustCreate("/log", O_DIRECT|O_APPEND)
	in := f.in
	noTrace := func(what string, fn func() (int, error)) {
		t.Helper()
		writes := e.fault.Stats().Write.Submitted
		n, err := fn()
		if !errors.Is(err, syscall.EAGAIN) || n != 0 {
			t.Fatalf("%s: %d, %v; want EAGAIN", what, n, err)
		}
		if in.size() != 0 || in.appends.pending.Load() != 0 || e.fault.Stats().Write.Submitted != writes {
			t.Fatalf("%s: EAGAIN left a trace", what)
		}
	}
	buf := record(4096, 0)
	noTrace("append into a hole", func() (int, error) { return f.Pwrite(buf, 0, RWFNoWait) })
	if err := f.Fallocate(FallocKeepSize, 0, 2*4096); err != nil {
		t.Fatal(err)
	}
	r := in.ranges.Lock(0, 1)
	noTrace("append into a held block", func() (int, error) { return f.Pwrite(buf, 0, RWFNoWait) })
	in.ranges.Unlock(r)
	if n, err := f.Pwrite(buf, 0, RWFNoWait); err != nil || n != 4096 {
		t.Fatalf("NOWAIT append into preallocated blocks: %d, %v", n, err)
	}
	if ids := recordsOf(t, mustReadAll(t, f), 4096); fmt.Sprint(ids) != "[0]" {
		t.Fatalf("records %v", ids)
	}
	_ = device.AlignedBuf
}

// TestSpeculativePrealloc: direct appends allocate ahead of EOF, so that a
// single appender commits about one metadata transaction per append (its
// publication) rather than two; the last close gives back what no append
// wrote, and leaves alone blocks that a fallocate placed past EOF.
func TestSpeculativePrealloc(t *testing.T) {
	e := policyEnv(t, Concurrent())
	f := e.mustCreate("/log", O_DIRECT|O_APPEND)
	e.fs.ResetCounters()
	const n = 64
	for i := range n {
		if _, err := f.Write(record(4096, i)); err != nil {
			t.Fatal(err)
		}
	}
	c := e.fs.Counters()
	if c["MetaCommits"] > n+n/8 {
		t.Fatalf("%d metadata commits for %d appends, want about one each", c["MetaCommits"], n)
	}
	a, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if a.Blocks*512 <= n*4096 {
		t.Fatalf("%d bytes allocated for %d appended: nothing ahead of EOF", a.Blocks*512, n*4096)
	}
	checkClean(t, e.fs)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := e.fs.OpenFile("/log", O_RDWR|O_APPEND|O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := g.Stat(); a.Blocks*512 != n*4096 {
		t.Fatalf("after the last close %d bytes allocated, want %d", a.Blocks*512, n*4096)
	}
	// A file with blocks placed past EOF by fallocate keeps them.
	if err := g.Fallocate(FallocKeepSize, n*4096, 16*4096); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(record(4096, n)); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := e.fs.OpenFile("/log", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := h.Stat(); a.Blocks*512 != (n+16)*4096 {
		t.Fatalf("fallocated blocks given back: %d bytes allocated, want %d", a.Blocks*512, (n+16)*4096)
	}
	if ids := recordsOf(t, mustReadAll(t, h), 4096); len(ids) != n+1 {
		t.Fatalf("%d records", len(ids))
	}
	checkClean(t, e.fs)
	h.Close()
	// Reloaded (the fallocate is not known in core any more), the file's
	// blocks past EOF are still not the appends' to give back.
	e = e.reopen()
	k, err := e.fs.OpenFile("/log", O_RDWR|O_APPEND|O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Write(record(4096, n+1)); err != nil {
		t.Fatal(err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	k, err = e.fs.OpenFile("/log", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := k.Stat(); a.Blocks*512 != (n+16)*4096 {
		t.Fatalf("after a reload, %d bytes allocated, want %d", a.Blocks*512, (n+16)*4096)
	}
	checkClean(t, e.fs)
}
