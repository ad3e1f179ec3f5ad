package iolock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestRangeGrants runs testdata/ranges, which shows the order in which a
// RangeLock grants requests. Regenerate the expected output with
//
//	go test ./iolock -run TestRangeGrants -rewrite
//
// Commands (requests are queued with Enqueue, so the script needs no
// goroutines):
//
//	reset                            a fresh RangeLock
//	enqueue name=N first=F n=C       Enqueue [F, F+C): granted or queued
//	trylock name=N first=F n=C       TryLock [F, F+C): granted or refused
//	unlock name=N                    Unlock N: the requests it granted
//	state                            the requests present, in arrival order
//	stats                            Stats
func TestRangeGrants(t *testing.T) {
	var l *RangeLock
	reqs := map[string]*Range{}
	names := map[*Range]string{}
	granted := func() map[*Range]bool {
		m := map[*Range]bool{}
		for r := range names {
			m[r] = l.Granted(r)
		}
		return m
	}
	datadriven.RunTest(t, "testdata/ranges", func(t *testing.T, d *datadriven.TestData) string {
		if l == nil || d.Cmd == "reset" {
			l = &RangeLock{}
			clear(reqs)
			clear(names)
			if d.Cmd == "reset" {
				return ""
			}
		}
		var name string
		var first, n uint64
		switch d.Cmd {
		case "enqueue", "trylock":
			d.ScanArgs(t, "name", &name)
			d.ScanArgs(t, "first", &first)
			d.ScanArgs(t, "n", &n)
			var r *Range
			if d.Cmd == "enqueue" {
				r = l.Enqueue(first, n)
			} else if r = l.TryLock(first, n); r == nil {
				return "refused: " + name + "\n"
			}
			reqs[name], names[r] = r, name
			if l.Granted(r) {
				return "granted: " + name + "\n"
			}
			return "queued: " + name + "\n"
		case "unlock":
			d.ScanArgs(t, "name", &name)
			r := reqs[name]
			if r == nil {
				d.Fatalf(t, "no request %s", name)
			}
			before := granted()
			delete(reqs, name)
			delete(names, r)
			l.Unlock(r)
			var now []string
			for o, was := range before {
				if o != r && !was && l.Granted(o) {
					now = append(now, names[o])
				}
			}
			slices.Sort(now)
			if len(now) == 0 {
				return "granted: none\n"
			}
			return "granted: " + strings.Join(now, " ") + "\n"
		case "state":
			var b strings.Builder
			l.mu.Lock()
			for r := l.mu.head; r != nil; r = r.next {
				st := "queued"
				if r.granted {
					st = "held"
				}
				fmt.Fprintf(&b, "%s [%d, %d) %s\n", names[r], r.first, r.end, st)
			}
			l.mu.Unlock()
			if b.Len() == 0 {
				return "empty\n"
			}
			return b.String()
		case "stats":
			s := l.Stats()
			return fmt.Sprintf("acquired=%d contended=%d tryfailed=%d maxheld=%d\n", s.Acquired, s.Contended, s.TryFailed, s.MaxHeld)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// TestRangeModel checks a RangeLock against its definition over seeded
// random sequences of Enqueue, TryLock and Unlock: a request is granted
// exactly when no earlier request still present overlaps it, so no two
// granted requests ever overlap and nothing waits for a later request.
func TestRangeModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var l RangeLock
		var present []*Range // arrival order
		for step := range 300 {
			if len(present) > 0 && rng.IntN(3) == 0 {
				i := rng.IntN(len(present))
				l.Unlock(present[i])
				present = slices.Delete(present, i, i+1)
			} else {
				first, n := uint64(rng.IntN(32)), uint64(1+rng.IntN(4))
				if rng.IntN(4) == 0 {
					if r := l.TryLock(first, n); r != nil {
						present = append(present, r)
					}
				} else {
					present = append(present, l.Enqueue(first, n))
				}
			}
			for i, r := range present {
				want := true
				for _, o := range present[:i] {
					if o.overlaps(r) {
						want = false
					}
				}
				if got := l.Granted(r); got != want {
					t.Fatalf("seed %d step %d: request %d [%d, %d) granted=%v, want %v", seed, step, i, r.first, r.end, got, want)
				}
			}
			if p, w := l.Len(); p != len(present) {
				t.Fatalf("seed %d step %d: Len %d (%d waiting), want %d", seed, step, p, w, len(present))
			}
		}
		for _, r := range present {
			l.Unlock(r)
		}
		if p, w := l.Len(); p != 0 || w != 0 {
			t.Fatalf("seed %d: %d requests (%d waiting) left", seed, p, w)
		}
	}
}

// TestRangeLockExcludes: goroutines locking random ranges never hold
// overlapping blocks at once (a per-block owner count), and every one of
// them gets through.
func TestRangeLockExcludes(t *testing.T) {
	var l RangeLock
	var owners [16]atomic.Int32
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				first, n := uint64(rng.IntN(12)), uint64(1+rng.IntN(4))
				r := l.Lock(first, n)
				for b := first; b < first+n; b++ {
					if owners[b].Add(1) != 1 {
						t.Errorf("block %d held twice", b)
					}
				}
				for b := first; b < first+n; b++ {
					owners[b].Add(-1)
				}
				l.Unlock(r)
			}
		}()
	}
	wg.Wait()
	if s := l.Stats(); s.Acquired != 8*2000 {
		t.Fatalf("Stats %+v, want %d acquired", s, 8*2000)
	}
}

// TestRangeWaitAfterGrant: a request granted between Enqueue and Wait
// (its blocker unlocked first) does not block in Wait, and one unlocked
// without waiting gives its place up.
func TestRangeWaitAfterGrant(t *testing.T) {
	var l RangeLock
	a := l.Enqueue(0, 4)
	b := l.Enqueue(2, 4)
	c := l.Enqueue(5, 1)
	if !l.Granted(a) || l.Granted(b) || l.Granted(c) {
		t.Fatal("want a granted, b and c queued")
	}
	l.Unlock(a)
	l.Wait(b)   // granted by the Unlock: returns at once
	l.Unlock(c) // gives up its place without waiting
	d := l.TryLock(5, 1)
	if d != nil {
		t.Fatal("TryLock of a block b holds succeeded")
	}
	l.Unlock(b)
	if d = l.TryLock(5, 1); d == nil {
		t.Fatal("TryLock of a free block failed")
	}
	l.Unlock(d)
}
