package uring

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A Host is a ring whose owner, a goroutine locked to its OS thread that
// submits and reaps the ring's entries, lends it to code running on that
// thread: an I/O started there can travel on the owner's ring, submitted
// by the owner's next io_uring_enter together with the owner's own
// entries, and completed by the owner's reaping, instead of costing a
// second ring's system call and a wake-up of that ring's reaper. FUSE's
// io_uring queues lend theirs to the device (fuseuring, directdev).
type Host interface {
	// Borrow fills an SQE of the ring with op.Prep and publishes it;
	// the owner's next io_uring_enter submits it and, when its CQE is
	// reaped, the owner calls op.Complete on its thread. It reports
	// false, with nothing done, when the ring has no room.
	//
	// Preconditions: the caller runs on the owner's thread (ThreadHost
	// returned this Host).
	Borrow(op HostOp) bool
}

// HostOp is an operation borrowed on a Host.
type HostOp interface {
	// Prep fills sqe (zeroed) for the operation; UserData is the
	// host's.
	Prep(sqe *SQE)
	// Complete is called with the CQE's result, on the owner's thread,
	// with no lock of the host held: it may Borrow again (from h) and it
	// must not block.
	Complete(h Host, res int32)
}

// windows counts the lenders whose lending window is open (Window): while
// it is zero, which is most of the time, ThreadHost answers without the
// gettid(2) (about 1.7 us on this project's VM) that every device request
// would otherwise pay.
var windows atomic.Int32

// Window records that a lender opened (open) or closed its lending window:
// the stretch in which it may Borrow for code running on its thread. A
// lender opens and closes it in pairs.
func Window(open bool) {
	if open {
		windows.Add(1)
	} else {
		windows.Add(-1)
	}
}

// hosts maps the OS threads that lend their ring to it: an immutable map
// replaced whole under mu (lends are rare, lookups come with every device
// request), so that a lookup takes no lock.
var hosts struct {
	mu sync.Mutex // serialises the writers
	m  atomic.Pointer[map[int32]Host]
}

// LendThread makes h the Host of the calling thread, which must be locked
// to the calling goroutine (runtime.LockOSThread) for as long as the lend
// lasts, and returns the function that ends it (call it on any goroutine).
func LendThread(h Host) (end func()) {
	tid := int32(unix.Gettid())
	update(func(m map[int32]Host) { m[tid] = h })
	return func() {
		update(func(m map[int32]Host) {
			if m[tid] == h {
				delete(m, tid)
			}
		})
	}
}

// update replaces hosts.m with a copy changed by change.
func update(change func(map[int32]Host)) {
	hosts.mu.Lock()
	defer hosts.mu.Unlock()
	m := make(map[int32]Host)
	if old := hosts.m.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	change(m)
	if len(m) == 0 {
		hosts.m.Store(nil)
		return
	}
	hosts.m.Store(&m)
}

// ThreadHost returns the Host the calling thread lends, or nil; nil too
// while no lender has its window open (Window). A lending thread is locked
// to its owner goroutine, on which nothing else runs, so a non-nil result
// says the caller is that owner. It costs an atomic load while no window
// is open, and a gettid(2) and a map lookup otherwise.
func ThreadHost() Host {
	if windows.Load() == 0 {
		return nil
	}
	m := hosts.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[int32(unix.Gettid())]
}
