package sluice

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/sluicefs/sluice/device/faultdev"
)

// The rules of block-range exclusion (Policy.BlockRangeExclusion,
// directWriteRange in dio.go), observed at the device (writes held at a
// gate, the most in flight at once), in the block-range lock (requests
// queued) and in the engine's counters.

// unwrittenFile makes /f of n blocks, fallocated (unwritten, within EOF),
// open O_DIRECT.
func unwrittenFile(t *testing.T, e *testEnv, n int) *File {
	t.Helper()
	f := e.mustCreate("/f", O_DIRECT)
	if err := f.Fallocate(0, 0, int64(n)*4096); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRangeWritesRunTogether: sub-block writes into different blocks of
// one unwritten extent are all in flight at the device at once under
// block-range exclusion, with neither the exclusive lock nor a drain; under
// the seeds' policy (seed 000's fallback) one at a time.
func TestRangeWritesRunTogether(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		pol     Policy
		maxWant int64
	}{{Concurrent(), n}, {Seeds(), 1}} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			e := policyEnv(t, tc.pol)
			f := unwrittenFile(t, e, n)
			model := make([]byte, n*4096)
			e.fault.ResetStats()
			e.fs.ResetCounters()
			g := e.fault.NewGate(faultdev.Writes)
			var wg sync.WaitGroup
			for i := range n {
				buf := pattern(512, byte(i+1))
				copy(model[i*4096+512:], buf)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := f.WriteAt(buf, int64(i)*4096+512); err != nil {
						t.Error(err)
					}
				}()
			}
			passGate(t, g, n, tc.maxWant == n, "writes", nil)
			wg.Wait()
			if got := e.fault.Stats().Write.MaxInFlight; got != tc.maxWant {
				t.Fatalf("max writes in flight %d, want %d", got, tc.maxWant)
			}
			c := e.fs.Counters()
			if tc.pol.BlockRangeExclusion && (c["LockRangeUnaligned"] != n || c["LockExclUnaligned"] != 0 || c["Drains"] != 0) {
				t.Fatalf("counters %v: want %d range writes, nothing exclusive", c, n)
			}
			if !tc.pol.BlockRangeExclusion && c["LockExclUnaligned"] != n {
				t.Fatalf("counters %v: want %d exclusive writes", c, n)
			}
			if got := mustReadAll(t, f); !bytes.Equal(got, model) {
				t.Fatal("file differs from the model")
			}
			checkClean(t, e.fs)
		})
	}
}

// TestRangeWritesSameBlockOrdered: a second sub-block write into the block
// a first one is writing waits for the block's range (it never reaches the
// device while the first is in flight), then finds the block written and
// writes its bytes in place; the block holds both writes and zeros.
func TestRangeWritesSameBlockOrdered(t *testing.T) {
	for _, kind := range []string{"unwritten", "hole"} {
		t.Run(kind, func(t *testing.T) {
			e := policyEnv(t, Concurrent())
			var f *File
			if kind == "unwritten" {
				f = unwrittenFile(t, e, 4)
			} else {
				f = e.mustCreate("/f", O_DIRECT)
				if err := f.Truncate(4 * 4096); err != nil {
					t.Fatal(err)
				}
			}
			in := f.in
			a, b := pattern(512, 1), pattern(1024, 2)
			g := e.fault.NewGate(faultdev.Writes)
			first := make(chan error, 1)
			go func() { _, err := f.WriteAt(a, 2*4096); first <- err }()
			if err := g.WaitHeld(heldCtx(t), 1); err != nil {
				t.Fatal(err)
			}
			second := make(chan error, 1)
			go func() { _, err := f.WriteAt(b, 2*4096+2048); second <- err }()
			waitFor(t, "the second write to queue on the block's range", func() bool {
				_, waiting := in.ranges.Len()
				return waiting == 1
			})
			if g.Held() != 1 {
				t.Fatalf("%d writes at the device, want only the first", g.Held())
			}
			g.Open()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if err := <-second; err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 4*4096)
			copy(want[2*4096:], a)
			copy(want[2*4096+2048:], b)
			if got := mustReadAll(t, f); !bytes.Equal(got, want) {
				t.Fatal("the block lost a write, or holds bytes it should not")
			}
			if c := e.fs.Counters(); c["LockRangeUnaligned"] != 2 || c["LockExclUnaligned"] != 0 {
				t.Fatalf("counters %v", c)
			}
			checkClean(t, e.fs)
		})
	}
}

// TestRangeWritesExcludedBySpaceOps: truncate and punch still exclude every
// write: each waits (in its drain) for a sub-block write held at the
// device, and completes only once it has.
func TestRangeWritesExcludedBySpaceOps(t *testing.T) {
	for _, op := range []string{"truncate", "punch"} {
		t.Run(op, func(t *testing.T) {
			e := policyEnv(t, Concurrent())
			f := unwrittenFile(t, e, 4)
			g := e.fault.NewGate(faultdev.Writes)
			wrote := make(chan error, 1)
			go func() { _, err := f.WriteAt(pattern(512, 3), 3*4096); wrote <- err }()
			if err := g.WaitHeld(heldCtx(t), 1); err != nil {
				t.Fatal(err)
			}
			e.fs.ResetCounters()
			done := make(chan error, 1)
			go func() {
				if op == "truncate" {
					done <- f.Truncate(2 * 4096)
				} else {
					done <- f.Fallocate(FallocPunchHole|FallocKeepSize, 2*4096, 2*4096)
				}
			}()
			waitFor(t, op+" to drain", func() bool { return e.fs.counters.Drains.Load() == 1 })
			select {
			case err := <-done:
				t.Fatalf("%s completed (%v) while a write was in flight", op, err)
			default:
			}
			g.Open()
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 2*4096)
			if op == "punch" {
				want = make([]byte, 4*4096)
			}
			if got := mustReadAll(t, f); !bytes.Equal(got, want) {
				t.Fatalf("%s after the write: the file is not what %s leaves", op, op)
			}
			checkClean(t, e.fs)
		})
	}
}

// TestEOFBlockOverwriteOrdersWithAppend: a sub-block direct overwrite of the
// block holding EOF takes the block's range, so a buffered append into the
// same block waits for it (its page would otherwise be written back whole
// over the overwrite's bytes, unit by unit); both writes survive.
func TestEOFBlockOverwriteOrdersWithAppend(t *testing.T) {
	e := policyEnv(t, Concurrent())
	f, model := e.prewrite("/f", 4096+1024, 5) // EOF inside block 1
	in := f.in
	bf, err := e.fs.OpenFile("/f", O_RDWR|O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.fs.ResetCounters()
	g := e.fault.NewGate(faultdev.Writes)
	over := pattern(512, 7)
	wrote := make(chan error, 1)
	go func() { _, err := f.WriteAt(over, 4096+512); wrote <- err }()
	if err := g.WaitHeld(heldCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	app := pattern(1000, 8)
	appended := make(chan error, 1)
	go func() { _, err := bf.Write(app); appended <- err }()
	waitFor(t, "the append to queue on the EOF block's range", func() bool {
		_, waiting := in.ranges.Len()
		return waiting == 1
	})
	g.Open()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	copy(model[4096+512:], over)
	model = append(model, app...)
	check := func(what string) {
		t.Helper()
		if got := mustReadAll(t, f); !bytes.Equal(got, model) {
			t.Fatalf("%s: the file differs from the model", what)
		}
	}
	check("cached")
	if err := bf.Fsync(); err != nil { // the append's page goes to the device
		t.Fatal(err)
	}
	if err := in.invalidateRange(0, 3*4096); err != nil {
		t.Fatal(err)
	}
	check("from the device")
	if c := e.fs.Counters(); c["LockRangeUnaligned"] != 1 || c["LockSharedAppend"] != 1 {
		t.Fatalf("counters %v", c)
	}
	checkClean(t, e.fs)
}

// TestRangeWritesModel: sub-block and aligned direct writes, at random
// offsets of a partly written, partly unwritten, partly sparse file, with
// random device latencies, all land (non-overlapping writes never lose each
// other's bytes), under every policy.
func TestRangeWritesModel(t *testing.T) {
	for _, pol := range []Policy{Concurrent(), Seeds(), Classic()} {
		t.Run(pol.String(), func(t *testing.T) {
			e := policyEnv(t, pol)
			for seed := range uint64(10) {
				f := e.mustCreate(fmt.Sprintf("/f%d", seed), O_DIRECT)
				const blocks = 16
				if err := f.Truncate(blocks * 4096); err != nil {
					t.Fatal(err)
				}
				if err := f.Fallocate(FallocKeepSize, 4*4096, 8*4096); err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt(pattern(4*4096, byte(seed)), 0); err != nil {
					t.Fatal(err)
				}
				model := mustReadAll(t, f)
				e.fault.SetLatency(faultdev.Writes, faultdev.Uniform(0, 200e3, seed))
				// Each writer owns 512 B slots (slot = writer mod 8),
				// so writes never overlap but share blocks.
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for b := range blocks {
							if (b+w)%3 == 0 {
								continue
							}
							off := int64(b)*4096 + int64(w)*512
							buf := pattern(512, byte(seed*31)+byte(w*7+b))
							if _, err := f.WriteAt(buf, off); err != nil {
								t.Error(err)
							}
						}
					}()
				}
				for w := range 8 {
					for b := range blocks {
						if (b+w)%3 == 0 {
							continue
						}
						off := b*4096 + w*512
						copy(model[off:], pattern(512, byte(seed*31)+byte(w*7+b)))
					}
				}
				wg.Wait()
				e.fault.SetLatency(faultdev.Writes, nil)
				if got := mustReadAll(t, f); !bytes.Equal(got, model) {
					t.Fatalf("seed %d: the file differs from the model", seed)
				}
				f.Close()
			}
			checkClean(t, e.fs)
		})
	}
}
