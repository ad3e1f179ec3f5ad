//lint:file-ignore SA2001 the cases take and release locks only to check their order

package lockrank

import (
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// catch runs fn with violations captured instead of panicking, and returns
// the reports.
func catch(t *testing.T, fn func()) []string {
	t.Helper()
	if !enabled {
		t.Skip("lock order is checked only with -race or -tags invariants")
	}
	var got []string
	old := onViolation
	onViolation = func(msg string) { got = append(got, msg) }
	defer func() { onViolation = old }()
	fn()
	return got
}

func TestOrder(t *testing.T) {
	var ino Mutex[InodeMu]
	var commit Mutex[Commit]
	var ns RWMutex[Namespace]
	var leaf, leaf2 Mutex[Leaf]
	var a, b Mutex[InodeMu]
	var page1, page2 int
	cases := []struct {
		name string
		fn   func()
		want string // substring of the report; "" for none
	}{
		{"increasing", func() {
			ns.RLock()
			ino.Lock()
			commit.Lock()
			commit.Unlock()
			ino.Unlock()
			ns.RUnlock()
		}, ""},
		{"inversion", func() { commit.Lock(); ino.Lock(); ino.Unlock(); commit.Unlock() }, "rank InodeMu taken while holding higher rank Commit"},
		{"same rank", func() { a.Lock(); b.Lock(); b.Unlock(); a.Unlock() }, "keys must increase"},
		{"ordered keys", func() { a.LockOrdered(1); b.LockOrdered(2); b.Unlock(); a.Unlock() }, ""},
		{"keys backwards", func() { a.LockOrdered(2); b.LockOrdered(1); b.Unlock(); a.Unlock() }, "keys must increase"},
		{"recursive read", func() { ns.RLock(); ns.RLock(); ns.RUnlock(); ns.RUnlock() }, "already held"},
		{"under a leaf", func() { leaf.Lock(); leaf2.Lock(); leaf2.Unlock(); leaf.Unlock() }, "while holding a leaf"},
		{"try is not checked", func() {
			commit.Lock()
			ok := ino.TryLock()
			commit.Unlock()
			if ok {
				ino.Unlock()
			}
		}, ""},
		{"under a try", func() { ino.TryLock(); ns.Lock(); ns.Unlock(); ino.Unlock() }, "rank Namespace taken while holding higher rank InodeMu"},
		{"custom lock", func() {
			Acquire(RankPage, 1, unsafe.Pointer(&page1))
			Acquire(RankPage, 2, unsafe.Pointer(&page2))
			ino.Lock()
			ino.Unlock()
			Release(unsafe.Pointer(&page2))
			Release(unsafe.Pointer(&page1))
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := catch(t, c.fn)
			switch {
			case c.want == "" && len(got) > 0:
				t.Fatalf("unexpected violation:\n%s", got[0])
			case c.want != "" && len(got) == 0:
				t.Fatalf("no violation, want %q", c.want)
			case c.want != "" && !strings.Contains(got[0], c.want):
				t.Fatalf("violation %q, want %q", got[0], c.want)
			}
			if h := Held(); len(h) != 0 {
				t.Fatalf("still held after the case: %v", h)
			}
		})
	}
}

// TestReportNamesBothStacks: the report shows where the held lock was taken
// and where the new one is being taken.
func TestReportNamesBothStacks(t *testing.T) {
	var ino Mutex[InodeMu]
	var commit Mutex[Commit]
	got := catch(t, func() {
		takeCommit(&commit)
		ino.Lock()
		ino.Unlock()
		commit.Unlock()
	})
	if len(got) != 1 {
		t.Fatalf("got %d reports", len(got))
	}
	for _, want := range []string{"taking InodeMu", "TestReportNamesBothStacks", "while holding", "Commit (key 0), taken at", "takeCommit"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("report lacks %q:\n%s", want, got[0])
		}
	}
}

func takeCommit(m *Mutex[Commit]) { m.Lock() }

// TestCrossGoroutineRelease: a lock released by another goroutine (a device
// completion) leaves its taker's held set, and a handed-off lock no longer
// constrains the goroutine that handed it off.
func TestCrossGoroutineRelease(t *testing.T) {
	var page int
	var ns Mutex[Namespace]
	got := catch(t, func() {
		Acquire(RankPage, 1, unsafe.Pointer(&page))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); Release(unsafe.Pointer(&page)) }()
		wg.Wait()
		ns.Lock() // would violate if the page were still held
		ns.Unlock()

		Acquire(RankPage, 1, unsafe.Pointer(&page))
		Handoff(unsafe.Pointer(&page))
		ns.Lock()
		ns.Unlock()
		wg.Add(1)
		go func() { defer wg.Done(); Release(unsafe.Pointer(&page)) }()
		wg.Wait()
	})
	if len(got) > 0 {
		t.Fatalf("unexpected violation:\n%s", got[0])
	}
}

func TestNames(t *testing.T) {
	n := Names()
	if n[0] != "FilePos" || n[len(n)-1] != "Leaf" {
		t.Fatalf("Names() = %v", n)
	}
}

// TestPerGoroutine: one goroutine's held locks do not constrain another's.
func TestPerGoroutine(t *testing.T) {
	var commit Mutex[Commit]
	var ino Mutex[InodeMu]
	got := catch(t, func() {
		commit.Lock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			ino.Lock()
			ino.Unlock()
		}()
		<-done
		commit.Unlock()
	})
	if len(got) > 0 {
		t.Fatalf("a lock held by one goroutine constrained another:\n%s", got[0])
	}
}

// TestWait: waiting for an event whose producer takes a rank is checked as
// taking it, and records nothing.
func TestWait(t *testing.T) {
	var commit Mutex[Commit]
	var ns Mutex[Namespace]
	got := catch(t, func() {
		ns.Lock()
		Wait(RankInodeMu, 0, nil) // fine: Namespace is below InodeMu
		ns.Unlock()
		commit.Lock()
		Wait(RankInodeMu, 0, nil) // the producer needs InodeMu, held above
		commit.Unlock()
	})
	if len(got) != 1 || !strings.Contains(got[0], "waiting: rank InodeMu taken while holding higher rank Commit") {
		t.Fatalf("reports %q", got)
	}
	if h := Held(); len(h) != 0 {
		t.Fatalf("Wait recorded %v", h)
	}
}
