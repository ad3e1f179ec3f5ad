package ring

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
)

// Regression test for an engine bug (fixed): the page cache lost clean pages
// from its LRU when eviction met a busy mapping, so a full cache of
// clean, idle pages cannot make room: blocking creators wait (up to
// 100 ms each, failing after 30 s with "page cache full"), and the ring's
// non-blocking attempts get EAGAIN and punt to a worker that blocks, even
// under the concurrent policy. With at most 8 pages locked at once and
// none dirty, a 256-page cache must never wait for room.
func TestEngineBugEvictionLosesCleanPages(t *testing.T) {
	pol := sluice.Concurrent()
	e := newEnvOpts(t, sluice.Options{Policy: &pol, CacheSizeBytes: 1 << 20})
	e.prewrite("/f", 16<<20, 1)
	f := e.open("/f", 0)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			buf := make([]byte, 4096)
			for i := 0; i < 3000 && !stop.Load(); i++ {
				if _, err := f.Pread(buf, rng.Int64N(4096)*4096, 0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	readers := make(chan struct{})
	go func() { wg.Wait(); close(readers) }()
	// At the first wait for room, stop the readers, and put the cached
	// pages back on the LRU (a NOWAIT read of a cached page touches it;
	// of an uncached one, fails at once), so that readers stuck waiting
	// for room can finish instead of waiting out the engine's 30 s limit.
	tick := 5 * time.Millisecond
	for done := false; !done; {
		select {
		case <-readers:
			done = true
		case <-time.After(tick):
			if e.fs.Counters()["CacheRoomWaits"] > 0 {
				stop.Store(true)
				tick = 100 * time.Millisecond // a stuck reader retries every 100 ms
				buf := make([]byte, 4096)
				for i := int64(0); i < 4096; i++ {
					f.Pread(buf, i*4096, sluice.RWFNoWait)
				}
			}
		}
	}
	c := e.fs.Counters()
	if w := c["CacheRoomWaits"]; w > 0 {
		t.Fatalf("%d waits for room in a cache of clean pages (%d evictions): eviction lost clean pages", w, c["CacheEvictions"])
	}
}

// Regression test for an engine bug (fixed): a dirty page was written back
// again while an earlier writeback of it is still in flight, and the two
// device writes are not ordered: when the older one lands last, the device
// keeps stale data although the page is clean, so the newer write is lost
// (here a direct read shows it at once; after eviction every read would).
// The kernel waits for (or skips) a folio under writeback before it starts
// another (write_cache_pages, folio_wait_writeback).
func TestEngineBugConcurrentWritebacksOfOnePage(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	e.prewrite("/f", 4096, 0)
	fb := e.open("/f", 0)
	fd := e.open("/f", sluice.O_DIRECT)
	v1, v2 := pattern(4096, 1), pattern(4096, 2)
	if _, err := fb.Pwrite(v1, 0, 0); err != nil { // page 0 dirty with v1
		t.Fatal(err)
	}
	g := e.gate(faultdev.Nth(1, faultdev.Writes))
	fsynced := make(chan error, 1)
	go func() { fsynced <- fb.Fsync() }() // writeback A (v1) is held
	gateHeld(t, g, 1)
	if _, err := fb.Pwrite(v2, 0, 0); err != nil { // page 0 dirty with v2
		t.Fatal(err)
	}
	// The direct read writes page 0 back (writeback B, v2, not held)
	// and then reads the device. A fixed engine makes B wait for A: then
	// the read waits for the gate.
	buf := device.AlignedBuf(4096)
	read := make(chan error, 1)
	go func() {
		_, err := fd.Pread(buf, 0, 0)
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
		g.Open() // writeback A lands after B: v1 over v2
	case <-time.After(200 * time.Millisecond):
		g.Open() // B waits for A (fixed), or the host is slow
		if err := <-read; err != nil {
			t.Fatal(err)
		}
	}
	checkBytes(t, "direct read after the second writeback", buf, v2)
	if err := <-fsynced; err != nil {
		t.Fatal(err)
	}
	if _, err := fd.Pread(buf, 0, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, v2) {
		t.Fatal("the device holds the older writeback's data (v1) after the newer one (v2): the last write is lost")
	}
}

// Regression test for an engine bug (fixed): the non-blocking (NOWAIT)
// attempts behind ReadAsync and WriteAsync could block, so Ring.Submit,
// which runs them on the caller's goroutine, blocks too:
//
//   - a direct write locks every cached page of its range to drop it, and
//     waits for one under read I/O (the kernel's kiocb_invalidate_pages
//     returns EAGAIN under IOCB_NOWAIT if any page is cached there);
//   - a classic-policy direct read writes back and drops the whole file's
//     cached pages, waiting for the writeback I/O.
func TestEngineBugNoWaitAttemptsBlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		pol  sluice.Policy
	}{{"direct-write-over-page-under-read", sluice.Concurrent()}, {"classic-direct-read-with-dirty-page", sluice.Classic()}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.pol)
			e.prewrite("/f", 8*4096, 1)
			fb := e.open("/f", 0)
			fd := e.open("/f", sluice.O_DIRECT)
			r := e.ring(4, nil)
			var g *faultdev.Gate
			var sqe SQE
			if tc.name == "direct-write-over-page-under-read" {
				g = e.gate(faultdev.Reads)
				if err := r.Read(fb, make([]byte, 4096), 0, 0, 1); err != nil { // page 0 locked, read held
					t.Fatal(err)
				}
				sqe = SQE{Op: OpWrite, File: fd, Buf: pattern(4096, 2), Off: 0, Tag: 2}
			} else {
				if _, err := fb.Pwrite(pattern(4096, 2), 4096, 0); err != nil { // page 1 dirty
					t.Fatal(err)
				}
				g = e.gate(faultdev.Writes)
				sqe = SQE{Op: OpRead, File: fd, Buf: device.AlignedBuf(4096), Off: 0, Tag: 2}
			}
			submitted := make(chan error, 1)
			go func() { submitted <- r.Submit(sqe) }()
			select {
			case err := <-submitted:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(time.Second):
				g.Open()
				<-submitted
				t.Fatal("the inline NOWAIT attempt blocked Submit until device I/O completed")
			}
			g.Open()
		})
	}
}
