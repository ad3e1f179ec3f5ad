package iolock

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// waitFor spins (yielding) until cond holds. The deadline only turns a hang
// into a failure; correctness never depends on time passing.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func TestZeroValueAndSize(t *testing.T) {
	var l Lock
	if sh, ex := l.Holders(); sh != 0 || ex || l.Waiters() != 0 || l.String() != "unlocked" {
		t.Fatalf("zero Lock: %d %v %d %q", sh, ex, l.Waiters(), l.String())
	}
	l.Lock(Exclusive)
	l.Unlock(Exclusive)
	l.Lock(Shared)
	l.Unlock(Shared)
	// Embedded in every in-core inode: keep it small.
	if sz := unsafe.Sizeof(Lock{}); sz > 128 {
		t.Errorf("sizeof(Lock) = %d, want <= 128", sz)
	}
	if sz := unsafe.Sizeof(DIO{}); sz > 64 {
		t.Errorf("sizeof(DIO) = %d, want <= 64", sz)
	}
}

func TestMisusePanics(t *testing.T) {
	for name, f := range map[string]func(l *Lock){
		"unlock shared unlocked":     func(l *Lock) { l.Unlock(Shared) },
		"unlock exclusive unlocked":  func(l *Lock) { l.Unlock(Exclusive) },
		"unlock shared of exclusive": func(l *Lock) { l.Lock(Exclusive); l.Unlock(Shared) },
		"unlock exclusive of shared": func(l *Lock) { l.Lock(Shared); l.Unlock(Exclusive) },
		"demote unlocked":            func(l *Lock) { l.Demote() },
		"demote shared":              func(l *Lock) { l.Lock(Shared); l.Demote() },
		"lock invalid mode":          func(l *Lock) { l.Lock(0) },
		"trylock invalid mode":       func(l *Lock) { l.TryLock(3) },
		"unlock invalid mode":        func(l *Lock) { l.Unlock(0) },
		"lockcontext invalid mode":   func(l *Lock) { _ = l.LockContext(context.Background(), 0) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			var l Lock
			f(&l)
		})
	}
}

func TestModeString(t *testing.T) {
	if Shared.String() != "shared" || Exclusive.String() != "exclusive" || Mode(7).String() != "Mode(7)" {
		t.Fatal(Shared.String(), Exclusive.String(), Mode(7).String())
	}
}

func TestString(t *testing.T) {
	var l Lock
	l.Lock(Shared)
	l.Lock(Shared)
	go l.Lock(Exclusive)
	waitFor(t, "exclusive queued", func() bool { return l.Waiters() == 1 })
	if got := l.String(); got != "shared(2) queue=[exclusive]" {
		t.Fatalf("String() = %q", got)
	}
	l.Unlock(Shared)
	l.Unlock(Shared)
	waitFor(t, "exclusive granted", func() bool { _, ex := l.Holders(); return ex })
	if got := l.String(); got != "exclusive" {
		t.Fatalf("String() = %q", got)
	}
	l.Unlock(Exclusive)
}

func TestLockContextAlreadyDone(t *testing.T) {
	var l Lock
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Grantable at once: succeeds despite the done context.
	if err := l.LockContext(ctx, Exclusive); err != nil {
		t.Fatal(err)
	}
	// Not grantable: fails without queueing.
	if err := l.LockContext(ctx, Shared); err != context.Canceled {
		t.Fatalf("got %v", err)
	}
	if l.Waiters() != 0 || l.state.Load()&queuedBit != 0 {
		t.Fatalf("left queued: %s", l.String())
	}
	l.Unlock(Exclusive)
	if !l.TryLock(Shared) {
		t.Fatal("TryLock after failed LockContext")
	}
	l.Unlock(Shared)
	if st := l.Stats(); st.Cancelled != 0 || st.ExclusiveAcquired != 1 || st.SharedAcquired != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLockContextTimeout(t *testing.T) {
	var l Lock
	l.Lock(Exclusive)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := l.LockContext(ctx, Exclusive); err != context.DeadlineExceeded {
		t.Fatalf("got %v", err)
	}
	if l.Waiters() != 0 {
		t.Fatal("waiter left behind")
	}
	l.Unlock(Exclusive)
	if err := l.LockContext(context.Background(), Exclusive); err != nil {
		t.Fatal(err)
	}
	l.Unlock(Exclusive)
}

func TestStatsAdd(t *testing.T) {
	a := Stats{1, 2, 3, 4, 5, 6, 7, 8}
	a.Add(Stats{1, 1, 1, 1, 1, 1, 1, 1})
	if a != (Stats{2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("%+v", a)
	}
}

// TestStarvation keeps the lock continuously held shared by several goroutines
// whose holds overlap, which starves a writer forever under a reader-preferring
// lock. A reader leaves only while another reader holds, or once a second
// request is seen queued: with the writer queued, that is a reader that could
// not get in, which only a lock that is fair to the writer produces.
//
// Each round, an exclusive request must be granted, and the number of shared
// grants that happen after it is queued and before it is granted must be at
// most the number of readers: only holds that were already granted when the
// writer queued (or were being granted at that instant) may finish; every new
// shared request queues behind the writer.
func TestStarvation(t *testing.T) {
	const readers = 4
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	var (
		l       Lock
		holding atomic.Int32 // readers between Lock returning and Unlock
		queued  atomic.Bool  // the writer of this round is known to be queued
		late    atomic.Int32 // shared grants seen while the writer waits
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for range readers {
		wg.Go(func() {
			for !stop.Load() {
				l.Lock(Shared)
				holding.Add(1)
				if queued.Load() {
					late.Add(1)
				}
				for {
					h := holding.Load()
					if h >= 2 && holding.CompareAndSwap(h, h-1) {
						break
					}
					if l.Waiters() >= 2 || stop.Load() {
						holding.Add(-1)
						break
					}
					runtime.Gosched()
				}
				l.Unlock(Shared)
				// Yield, so that with GOMAXPROCS=1 the other
				// goroutines run without waiting for preemption.
				runtime.Gosched()
			}
		})
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	for round := range rounds {
		// The readers hold the lock (and, by their release rule, keep
		// it held until a reader is seen queued).
		start := l.Stats().SharedAcquired
		waitFor(t, "a stream of readers", func() bool {
			return l.Stats().SharedAcquired >= start+20 && holding.Load() >= 1
		})
		before := l.Stats().ExclusiveContended
		var granted atomic.Bool
		go func() {
			l.Lock(Exclusive)
			granted.Store(true)
		}()
		// The writer is queued once its contended count shows. Only then
		// start counting grants: a reader granted earlier may sample
		// queued after it is set, which the bound allows for.
		waitFor(t, "writer queued", func() bool { return l.Stats().ExclusiveContended > before })
		queued.Store(true)
		waitFor(t, "writer granted", func() bool { return granted.Load() || late.Load() > readers })
		queued.Store(false)
		if n := late.Swap(0); n > readers {
			t.Fatalf("round %d: %d shared grants while the writer waited, want <= %d", round, n, readers)
		}
		if sh, ex := l.Holders(); sh != 0 || !ex {
			t.Fatalf("writer granted with holders shared=%d exclusive=%v", sh, ex)
		}
		l.Unlock(Exclusive)
	}
	st := l.Stats()
	t.Logf("stats: %+v", st)
	if st.ExclusiveAcquired != uint64(rounds) || st.ExclusiveContended != uint64(rounds) {
		t.Fatalf("stats: %+v", st)
	}
}

// TestStress runs random operations from many goroutines and checks, with
// counters kept by the goroutines themselves, that an exclusive holder never
// coexists with any other holder, that Demote never opens a gap, and that the
// Lock's own counters agree with what the goroutines did.
func TestStress(t *testing.T) {
	t.Run("fresh", func(t *testing.T) { testStress(t, 0, 0) })
	// Counters a few grants short of wrapping: the stress run crosses the
	// carry paths (fast path, TryLock, queue hand-off) many times over.
	t.Run("near-wrap", func(t *testing.T) { testStress(t, 1<<sharedBits-5, 1<<exclBits-5) })
}

func testStress(t *testing.T, presetShared, presetExcl uint64) {
	const workers = 8
	iters := 3000
	if testing.Short() {
		iters = 500
	}
	var (
		l                      Lock
		sharedN, exclN         atomic.Int32
		acqSh, acqEx           atomic.Uint64
		tryFailSh, tryFailEx   atomic.Uint64
		demotes, cancels       atomic.Uint64
		violations             atomic.Int32
		wg                     sync.WaitGroup
		checkShared, checkExcl = func() {
			if exclN.Load() != 0 {
				violations.Add(1)
			}
		}, func() {
			if exclN.Load() != 1 || sharedN.Load() != 0 {
				violations.Add(1)
			}
		}
	)
	l.state.Store(presetShared<<sharedShift | presetExcl<<exclShift)
	acqSh.Store(presetShared)
	acqEx.Store(presetExcl)
	gotShared := func() { sharedN.Add(1); checkShared(); acqSh.Add(1) }
	gotExcl := func() { exclN.Add(1); checkExcl(); acqEx.Add(1) }
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range iters {
				var held Mode
				switch op := rng.IntN(10); {
				case op < 4:
					l.Lock(Shared)
					gotShared()
					held = Shared
				case op < 6:
					l.Lock(Exclusive)
					gotExcl()
					held = Exclusive
				case op < 7:
					m := Mode(1 + rng.IntN(2))
					if !l.TryLock(m) {
						if m == Shared {
							tryFailSh.Add(1)
						} else {
							tryFailEx.Add(1)
						}
						continue
					}
					if m == Shared {
						gotShared()
					} else {
						gotExcl()
					}
					held = m
				default:
					m := Mode(1 + rng.IntN(2))
					ctx, cancel := context.WithCancel(context.Background())
					if rng.IntN(2) == 0 {
						cancel() // cancel at once: races with the grant
					} else {
						go cancel()
					}
					err := l.LockContext(ctx, m)
					cancel()
					if err != nil {
						cancels.Add(1)
						continue
					}
					if m == Shared {
						gotShared()
					} else {
						gotExcl()
					}
					held = m
				}
				for range rng.IntN(3) {
					runtime.Gosched()
				}
				if held == Exclusive && rng.IntN(2) == 0 {
					// Demote: account the shared hold before the
					// exclusive one ends, so a checker never sees
					// a gap in which the lock looks free.
					sharedN.Add(1)
					exclN.Add(-1)
					l.Demote()
					demotes.Add(1)
					checkShared()
					held = Shared
					runtime.Gosched()
				}
				if held == Shared {
					sharedN.Add(-1)
				} else {
					exclN.Add(-1)
				}
				l.Unlock(held)
			}
		})
	}
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d exclusion violations", v)
	}
	st := l.Stats()
	t.Logf("stats: %+v", st)
	if sh, ex := l.Holders(); sh != 0 || ex || l.Waiters() != 0 || l.state.Load()&(readerMask|writerBit|queuedBit) != 0 {
		t.Fatalf("not idle at the end: %s (state %#x)", l.String(), l.state.Load())
	}
	if st.SharedAcquired != acqSh.Load() || st.ExclusiveAcquired != acqEx.Load() ||
		st.SharedTryFailed != tryFailSh.Load() || st.ExclusiveTryFailed != tryFailEx.Load() ||
		st.Demoted != demotes.Load() {
		t.Fatalf("stats %+v disagree with workers: shared %d exclusive %d tryfail %d/%d demotes %d",
			st, acqSh.Load(), acqEx.Load(), tryFailSh.Load(), tryFailEx.Load(), demotes.Load())
	}
	// A cancelled LockContext either never queued (context done before it
	// had to) or queued and gave up; only the latter is in Cancelled.
	if st.Cancelled > cancels.Load() || st.Cancelled > st.SharedContended+st.ExclusiveContended {
		t.Fatalf("cancelled %d, workers saw %d", st.Cancelled, cancels.Load())
	}
	if st.SharedContended+st.ExclusiveContended > st.SharedAcquired+st.ExclusiveAcquired+st.Cancelled {
		t.Fatalf("more contended than acquired+cancelled: %+v", st)
	}
}

// TestCounterWrap crosses the lock word's grant counters' modulus on each
// path that grants: the fast path (Lock, TryLock) and the queue hand-off of a
// batch. Stats must count on without a jump.
func TestCounterWrap(t *testing.T) {
	const (
		shMod = 1 << sharedBits
		exMod = 1 << exclBits
	)
	var l Lock
	l.state.Store((shMod-1)<<sharedShift | (exMod-1)<<exclShift)
	check := func(wantSh, wantEx uint64) {
		t.Helper()
		if st := l.Stats(); st.SharedAcquired != wantSh || st.ExclusiveAcquired != wantEx {
			t.Fatalf("stats shared %d exclusive %d, want %d %d", st.SharedAcquired, st.ExclusiveAcquired, wantSh, wantEx)
		}
	}
	check(shMod-1, exMod-1)
	l.Lock(Shared) // wraps
	check(shMod, exMod-1)
	if !l.TryLock(Shared) {
		t.Fatal("TryLock failed")
	}
	l.Unlock(Shared)
	l.Unlock(Shared)
	check(shMod+1, exMod-1)
	if !l.TryLock(Exclusive) { // wraps
		t.Fatal("TryLock(Exclusive) failed")
	}
	check(shMod+1, exMod)
	l.Unlock(Exclusive)

	// A batch of queued readers whose grant wraps the counter.
	l.state.Store((shMod - 2) << sharedShift)
	l.mu.sharedCarry = 0
	l.Lock(Exclusive)
	for i := range 5 {
		go func() {
			l.Lock(Shared)
		}()
		waitFor(t, "reader queued", func() bool { return l.Waiters() == i+1 })
	}
	l.Unlock(Exclusive)
	waitFor(t, "readers granted", func() bool { sh, _ := l.Holders(); return sh == 5 })
	check(shMod+3, exMod+1)
	for range 5 {
		l.Unlock(Shared)
	}
	if sh, ex := l.Holders(); sh != 0 || ex || l.Waiters() != 0 {
		t.Fatalf("not idle: %s", l.String())
	}
}

// TestDemoteNoGap checks Demote's promise directly: while an exclusive holder
// demotes, a queued exclusive request is not granted until the demoted hold is
// released.
func TestDemoteNoGap(t *testing.T) {
	var l Lock
	l.Lock(Exclusive)
	got := make(chan struct{})
	go func() {
		l.Lock(Exclusive)
		close(got)
	}()
	waitFor(t, "writer queued", func() bool { return l.Waiters() == 1 })
	l.Demote()
	select {
	case <-got:
		t.Fatal("exclusive granted across Demote")
	default:
	}
	if sh, ex := l.Holders(); sh != 1 || ex || l.Waiters() != 1 {
		t.Fatalf("after demote: %s", l.String())
	}
	l.Unlock(Shared)
	<-got
	l.Unlock(Exclusive)
}
