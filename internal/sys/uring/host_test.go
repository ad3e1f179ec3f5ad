package uring

import (
	"runtime"
	"sync"
	"testing"
)

type fakeHost struct{ id int }

func (*fakeHost) Borrow(HostOp) bool { return false }

// TestThreadHost: ThreadHost names the Host of the calling thread only,
// for as long as the lend lasts, with several threads lending at once.
func TestThreadHost(t *testing.T) {
	if ThreadHost() != nil {
		t.Fatal("a Host before any lend")
	}
	const n = 4
	var lent, check, ended sync.WaitGroup
	lent.Add(n)
	check.Add(1)
	ended.Add(n)
	for i := range n {
		go func() {
			defer ended.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			h := &fakeHost{id: i}
			end := LendThread(h)
			Window(true)
			defer Window(false)
			lent.Done()
			check.Wait() // every thread lends now
			if got := ThreadHost(); got != Host(h) {
				t.Errorf("thread %d: ThreadHost %v, want its own %v", i, got, h)
			}
			end()
			if got := ThreadHost(); got != nil {
				t.Errorf("thread %d: ThreadHost %v after the lend ended", i, got)
			}
		}()
	}
	lent.Wait()
	if ThreadHost() != nil {
		t.Error("ThreadHost on a thread that lends nothing while others lend")
	}
	check.Done()
	ended.Wait()
	if hosts.m.Load() != nil {
		t.Error("the map of lenders is not empty after every lend ended")
	}
}
