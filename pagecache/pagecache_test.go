package pagecache

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newTestCache(pages int) (*Cache, *Mapping) {
	c := New(Options{CapacityBytes: int64(pages) * 4096, PageSize: 4096, DirtyRatio: 0.5})
	return c, c.NewMapping("file")
}

func TestCreateLockUnlock(t *testing.T) {
	_, m := newTestCache(16)
	p, created, err := m.GetOrCreate(3, false)
	if err != nil || !created {
		t.Fatalf("GetOrCreate: %v %v", created, err)
	}
	if !p.Locked() || p.Uptodate() {
		t.Fatal("a new page must come locked and not uptodate")
	}
	if p.TryLock() {
		t.Fatal("TryLock of a locked page succeeded")
	}
	p.SetUptodate()
	p.Unlock()
	if !p.TryLock() {
		t.Fatal("TryLock of an unlocked page failed")
	}
	p.Unlock()
	q, created, _ := m.GetOrCreate(3, false)
	if created || q != p {
		t.Fatal("a second GetOrCreate must return the same page")
	}
	m.Release(q)
	m.Release(p)
}

// TestAsyncWaiterNotLost: a callback armed while the page is locked fires
// exactly once at the unlock, and one armed on an unlocked page does not
// fire (the caller proceeds at once). Under a storm of lock/unlock cycles
// and arming goroutines, every armed callback fires: none is lost between
// its enqueue and the check.
func TestAsyncWaiterNotLost(t *testing.T) {
	_, m := newTestCache(16)
	p, _, _ := m.GetOrCreate(0, false)
	var fired atomic.Int32
	if p.WaitUnlockedAsync(func() { fired.Add(1) }) {
		t.Fatal("WaitUnlockedAsync on a locked page reported unlocked")
	}
	if p.LockAsync(func() { fired.Add(1) }) {
		t.Fatal("LockAsync on a locked page took the lock")
	}
	p.Unlock()
	if fired.Load() != 2 {
		t.Fatalf("%d callbacks fired at unlock, want 2", fired.Load())
	}
	if !p.WaitUnlockedAsync(func() { t.Error("callback of an unlocked page fired") }) {
		t.Fatal("WaitUnlockedAsync on an unlocked page did not report it")
	}
	if !p.LockAsync(func() { t.Error("callback fired although LockAsync took the lock") }) {
		t.Fatal("LockAsync on an unlocked page did not take it")
	}
	p.Unlock()

	// The storm.
	const arms = 20000
	var armed, fires atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			p.Lock()
			//lint:ignore SA2001 the test only needs the page lock taken and released
			p.Unlock()
		}
	}()
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < arms/4; i++ {
				if !p.WaitUnlockedAsync(func() { fires.Add(1) }) {
					armed.Add(1)
				}
			}
		}()
	}
	time.Sleep(10 * time.Millisecond)
	close(stop)
	wg.Wait()
	// One last unlock wakes any callback armed after the locker's last
	// cycle (it left the page unlocked, so none can be pending).
	deadline := time.Now().Add(5 * time.Second)
	for fires.Load() != armed.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if fires.Load() != armed.Load() {
		t.Fatalf("%d callbacks armed, %d fired: a wake-up was lost", armed.Load(), fires.Load())
	}
	m.Release(p)
}

// TestWakeupsArePerPage: unlocking one page never runs another page's
// waiters.
func TestWakeupsArePerPage(t *testing.T) {
	_, m := newTestCache(16)
	a, _, _ := m.GetOrCreate(0, false)
	b, _, _ := m.GetOrCreate(1, false)
	var aFired, bFired atomic.Int32
	a.WaitUnlockedAsync(func() { aFired.Add(1) })
	b.WaitUnlockedAsync(func() { bFired.Add(1) })
	b.Unlock()
	if aFired.Load() != 0 || bFired.Load() != 1 {
		t.Fatalf("after unlocking b: a fired %d, b fired %d", aFired.Load(), bFired.Load())
	}
	a.Unlock()
	if aFired.Load() != 1 {
		t.Fatal("a's waiter did not fire at a's unlock")
	}
}

// TestReadErrorReachesWaiters: a page still not uptodate after its unlock
// carries the read error for its waiters (they must not loop re-reading).
func TestReadErrorReachesWaiters(t *testing.T) {
	_, m := newTestCache(16)
	p, _, _ := m.GetOrCreate(0, false)
	got := make(chan error, 1)
	go func() {
		p.WaitUnlocked()
		got <- p.Err()
	}()
	time.Sleep(time.Millisecond)
	errRead := errors.New("device read failed")
	p.ClearUptodate(errRead)
	m.Remove(p)
	p.Unlock()
	if err := <-got; !errors.Is(err, errRead) {
		t.Fatalf("waiter saw %v, want the read error", err)
	}
	if m.Get(0) != nil {
		t.Fatal("the failed page is still in the mapping")
	}
}

// TestTruncateDuringWait: a page removed while a goroutine waits for it
// wakes the waiter, which sees it removed and looks the index up again.
func TestTruncateDuringWait(t *testing.T) {
	_, m := newTestCache(16)
	p, _, _ := m.GetOrCreate(5, false)
	p.SetUptodate()
	p.Unlock()
	p.Lock() // a truncate takes the page
	var saw atomic.Bool
	done := make(chan struct{})
	if p.WaitUnlockedAsync(func() { saw.Store(p.Removed()); close(done) }) {
		t.Fatal("page should be locked")
	}
	m.Remove(p)
	p.Unlock()
	<-done
	if !saw.Load() {
		t.Fatal("the woken waiter did not see the page removed")
	}
	if m.Get(5) != nil {
		t.Fatal("lookup after truncate found the page")
	}
	m.Release(p)
}

// TestEvictionKeepsBusyPages: a full cache evicts the least recently
// used clean page, never a dirty, locked or referenced one, and never
// holds more buffers than its capacity.
func TestEvictionKeepsBusyPages(t *testing.T) {
	c, m := newTestCache(16)
	var dirty, locked, held *Page
	for i := uint64(0); i < 16; i++ {
		p, _, err := m.GetOrCreate(i, false)
		if err != nil {
			t.Fatal(err)
		}
		p.SetUptodate()
		switch i {
		case 0:
			p.MarkDirty(0, 10)
			dirty = p
			p.Unlock()
			m.Release(p)
		case 1:
			locked = p // stays locked
			m.Release(p)
		case 2:
			held = p // stays referenced
			p.Unlock()
		default:
			p.Unlock()
			m.Release(p)
		}
	}
	for i := uint64(100); i < 140; i++ {
		p, _, err := m.GetOrCreate(i, true)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		p.SetUptodate()
		p.Unlock()
		m.Release(p)
		if s := c.Stats(); s.Buffers > s.CapacityPages {
			t.Fatalf("%d buffers over a capacity of %d pages", s.Buffers, s.CapacityPages)
		}
	}
	for _, p := range []*Page{dirty, locked, held} {
		if p.Removed() || m.Get(p.Index) == nil {
			t.Fatalf("page %d was evicted", p.Index)
		}
		m.Release(p)
	}
	if c.Stats().Evictions == 0 {
		t.Fatal("nothing was evicted")
	}
	locked.Unlock()
	m.Release(held)
}

// TestNoRoomWhenEverythingIsBusy: with every page dirty, a nowait creator
// gets ErrNoRoom at once instead of waiting.
func TestNoRoomWhenEverythingIsBusy(t *testing.T) {
	_, m := newTestCache(16)
	for i := uint64(0); i < 16; i++ {
		p, _, _ := m.GetOrCreate(i, false)
		p.SetUptodate()
		p.MarkDirty(0, 4096)
		p.Unlock()
		m.Release(p)
	}
	if _, _, err := m.GetOrCreate(99, true); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("GetOrCreate on a cache of dirty pages: %v, want ErrNoRoom", err)
	}
}

// TestThrottleWaitsForWriteback: over the dirty limit, ThrottleDirty
// kicks the flusher and returns once writeback cleaned enough pages.
func TestThrottleWaitsForWriteback(t *testing.T) {
	c, m := newTestCache(16)
	var pages []*Page
	for i := uint64(0); i < 12; i++ { // limit is 8
		p, _, _ := m.GetOrCreate(i, false)
		p.SetUptodate()
		p.MarkDirty(0, 4096)
		p.Unlock()
		pages = append(pages, p)
	}
	if !c.OverDirtyLimit() {
		t.Fatal("12 dirty pages of 16 should be over the 50% limit")
	}
	returned := make(chan struct{})
	go func() { c.ThrottleDirty(); close(returned) }()
	select {
	case <-c.Kick():
	case <-time.After(5 * time.Second):
		t.Fatal("the throttled writer did not kick the flusher")
	}
	select {
	case <-returned:
		t.Fatal("ThrottleDirty returned while over the limit")
	case <-time.After(20 * time.Millisecond):
	}
	for _, p := range pages[:6] { // "writeback"
		p.Lock()
		p.StartWriteback()
		p.Unlock()
		p.EndWriteback(nil)
	}
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("ThrottleDirty did not return after writeback")
	}
	if c.Stats().Throttles != 1 {
		t.Fatalf("throttles = %d", c.Stats().Throttles)
	}
	m.ReleaseAll(pages)
}

// TestFailedWritebackStaysDirty: a page whose writeback failed is dirty
// again and the mapping reports the error once (fsyncgate: never report a
// failed writeback as done).
func TestFailedWritebackStaysDirty(t *testing.T) {
	_, m := newTestCache(16)
	p, _, _ := m.GetOrCreate(0, false)
	p.SetUptodate()
	p.MarkDirty(0, 100)
	if !p.StartWriteback() {
		t.Fatal("StartWriteback of a dirty page failed")
	}
	p.Unlock()
	errIO := errors.New("EIO")
	p.EndWriteback(errIO)
	if !p.Dirty() {
		t.Fatal("a page whose writeback failed is clean")
	}
	if err := m.TakeError(); !errors.Is(err, errIO) {
		t.Fatalf("TakeError = %v", err)
	}
	if err := m.TakeError(); err != nil {
		t.Fatalf("second TakeError = %v, want nil", err)
	}
	m.Release(p)
}

// TestHasDirty follows a page through dirty, writeback (ended, failed,
// and of a removed page): HasDirty sees it in its range whenever it is
// dirty or under writeback, and not once it is clean.
func TestHasDirty(t *testing.T) {
	_, m := newTestCache(16)
	check := func(when string, want bool) {
		t.Helper()
		if got := m.HasDirty(0, 3); got != want {
			t.Errorf("%s: HasDirty(0, 3) = %v, want %v", when, got, want)
		}
		if m.HasDirty(4, 9) {
			t.Errorf("%s: HasDirty(4, 9) = true for a page at index 2", when)
		}
	}
	p, _, _ := m.GetOrCreate(2, false)
	p.SetUptodate()
	check("clean", false)
	p.MarkDirty(0, 100)
	check("dirty", true)
	p.StartWriteback()
	check("under writeback", true)
	p.EndWriteback(errors.New("EIO"))
	check("dirty again after a failed writeback", true)
	m.TakeError()
	p.StartWriteback()
	p.EndWriteback(nil)
	check("written back", false)
	p.MarkDirty(0, 100)
	p.StartWriteback()
	m.Remove(p)
	if m.nwriteback.Load() != 1 {
		t.Errorf("a removed page under writeback: %d counted", m.nwriteback.Load())
	}
	p.EndWriteback(nil)
	if m.ndirty.Load() != 0 || m.nwriteback.Load() != 0 {
		t.Errorf("after its writeback: %d dirty, %d under writeback counted", m.ndirty.Load(), m.nwriteback.Load())
	}
	check("removed", false)
	p.Unlock()
	m.Release(p)
}

// TestAsyncWaitAllocs: a callback waiting for a page's unlock, the unlock
// that runs it and the page's trips on and off the LRU allocate nothing
// (an async buffered read's cycle).
func TestAsyncWaitAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c, m := newTestCache(16)
	p, _, _ := m.GetOrCreate(0, false) // locked, referenced
	p.SetUptodate()
	ran := 0
	cb := func() { ran++ }
	if n := testing.AllocsPerRun(100, func() {
		if p.WaitUnlockedAsync(cb) {
			t.Fatal("WaitUnlockedAsync of a locked page returned true")
		}
		p.Unlock()
		m.Release(p) // on the LRU
		c.mu.Lock()
		c.lru.remove(p) // as eviction takes it off
		c.mu.Unlock()
		if p = m.Get(0); p == nil || !p.TryLock() {
			t.Fatal("page 0 lost")
		}
	}); n > 0 {
		t.Errorf("%.1f allocations per wait, unlock and LRU round trip", n)
	}
	if ran != 101 {
		t.Errorf("callback ran %d times, want 101", ran)
	}
	p.Unlock()
	m.Release(p)
}

// TestWaitersInOrder: an unlock runs the callbacks queued on the page in
// the order they were queued, the inline first one included, once each.
func TestWaitersInOrder(t *testing.T) {
	_, m := newTestCache(16)
	p, _, _ := m.GetOrCreate(0, false)
	var got []int
	for i := range 4 {
		if p.WaitUnlockedAsync(func() { got = append(got, i) }) {
			t.Fatal("WaitUnlockedAsync of a locked page returned true")
		}
	}
	p.Unlock()
	if !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("callbacks ran as %v", got)
	}
	if !p.TryLock() {
		t.Fatal("the page stayed locked")
	}
	p.Unlock() // none left
	if len(got) != 4 {
		t.Errorf("callbacks ran again: %v", got)
	}
	m.Release(p)
}

// TestPartialPage: a write to a page that is not uptodate keeps a valid
// range; covering the whole page makes it uptodate.
func TestPartialPage(t *testing.T) {
	_, m := newTestCache(16)
	p, _, _ := m.GetOrCreate(0, false)
	p.MarkDirty(100, 200)
	if from, to := p.Valid(); from != 100 || to != 200 || p.Uptodate() || !p.WritePending() {
		t.Fatalf("valid [%d, %d), uptodate %v", from, to, p.Uptodate())
	}
	p.MarkDirty(200, 4096)
	p.MarkDirty(0, 100)
	if !p.Uptodate() {
		t.Fatal("a page covered by writes should be uptodate")
	}
	p.Unlock()
	m.Release(p)
}
