package ring

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/faultdev"
)

// readPaths are the two ways a buffered read that meets a page under I/O
// can go: concurrent arms a retry on the page's unlock (async), classic
// punts it to a worker that blocks on the page.
var readPaths = []struct {
	name  string
	pol   sluice.Policy
	async bool
}{
	{"concurrent", sluice.Concurrent(), true},
	{"classic", sluice.Classic(), false},
}

// Seed 003: 32 buffered reads of cold pages, all waiting for their device
// reads at once. Concurrent: each arms a callback on its page and no pool
// worker runs at all; classic: each is punted and a worker blocks on its
// page, 32 at once.
func TestQueuedColdReads(t *testing.T) {
	const n = 32
	for _, tc := range readPaths {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.pol)
			data := e.prewrite("/f", 2*n*4096, 3)
			f := e.open("/f", 0)
			g := e.gate(faultdev.Reads)
			r := e.ring(n, nil)
			bufs := make([][]byte, n)
			for i := range bufs {
				// Every other page, so that no read looks sequential
				// and starts readahead into its neighbour.
				bufs[i] = make([]byte, 4096)
				if err := r.Read(f, bufs[i], int64(2*i)*4096, 0, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			gateHeld(t, g, n)
			if tc.async {
				// The inline attempts armed their retries before Submit
				// returned.
				st := r.Stats()
				if st.RetriesArmed != n || st.Punts != 0 || st.Workers != 0 {
					t.Fatalf("want %d reads armed and no punt: %v", n, st)
				}
			} else {
				waitFor(t, "32 workers blocked on pages", func() bool { return r.Stats().WorkersBlocked == n })
			}
			g.Open()
			for _, c := range reap(t, r, n) {
				if c.Err != nil || c.Res != 4096 {
					t.Fatalf("read %d: %+v", c.Tag, c)
				}
				want := CQEPunted
				if tc.async {
					want = CQERetried | CQEInline
				}
				if c.Flags != want {
					t.Fatalf("read %d: flags %b, want %b", c.Tag, c.Flags, want)
				}
				off := 2 * int(c.Tag) * 4096
				checkBytes(t, "read", bufs[c.Tag], data[off:off+4096])
			}
			st := r.Stats()
			if tc.async {
				if st.WorkersBlockedPeak != 0 || st.RetriesFired != n || st.Inline != n {
					t.Fatalf("concurrent: %v", st)
				}
			} else if st.WorkersBlockedPeak != n || st.Punts != n {
				t.Fatalf("classic: %v", st)
			}
		})
	}
}

// A read that copies some bytes and then meets a page under I/O completes
// at once with the partial count.
func TestAsyncReadPartial(t *testing.T) {
	for _, pol := range []sluice.Policy{sluice.Concurrent(), sluice.Classic()} {
		t.Run(pol.String(), func(t *testing.T) {
			e := newEnv(t, pol)
			data := e.prewrite("/f", 8*4096, 5)
			f := e.open("/f", 0)
			if _, err := f.Pread(make([]byte, 4096), 0, 0); err != nil { // cache page 0
				t.Fatal(err)
			}
			g := e.gate(faultdev.Reads)
			r := e.ring(4, nil)
			b1 := make([]byte, 4096)
			if err := r.Read(f, b1, 4096, 0, 1); err != nil { // page 1 goes under I/O
				t.Fatal(err)
			}
			gateHeld(t, g, 1)
			b2 := make([]byte, 8192)
			if err := r.Read(f, b2, 0, 0, 2); err != nil {
				t.Fatal(err)
			}
			c := reap(t, r, 1)[0]
			if c.Tag != 2 || c.Err != nil || c.Res != 4096 || c.Flags != CQEInline {
				t.Fatalf("partial read: %+v", c)
			}
			checkBytes(t, "partial read", b2[:4096], data[:4096])
			g.Open()
			c = reap(t, r, 1)[0]
			if c.Tag != 1 || c.Err != nil || c.Res != 4096 {
				t.Fatalf("read of page 1: %+v", c)
			}
			checkBytes(t, "page 1", b1, data[4096:8192])
		})
	}
}

// A page whose device read fails once: the read is retried (a new device
// read) and returns the right bytes, without a livelock.
func TestAsyncReadTransientError(t *testing.T) {
	for _, pol := range []sluice.Policy{sluice.Concurrent(), sluice.Classic()} {
		t.Run(pol.String(), func(t *testing.T) {
			e := newEnv(t, pol)
			data := e.prewrite("/f", 4*4096, 7)
			f := e.open("/f", 0)
			inj := e.fault.Inject(faultdev.OnNth(faultdev.Reads, 1))
			r := e.ring(4, nil)
			buf := make([]byte, 4096)
			if err := r.Read(f, buf, 0, 0, 1); err != nil {
				t.Fatal(err)
			}
			c := reap(t, r, 1)[0]
			if inj.Injected() != 1 {
				t.Fatalf("injected %d errors", inj.Injected())
			}
			switch {
			case c.Err == nil && c.Res == 4096:
				checkBytes(t, "read", buf, data[:4096])
			case errors.Is(c.Err, syscall.EIO):
			default:
				t.Fatalf("read: %+v", c)
			}
		})
	}
}

// A page whose device read keeps failing completes the read with EIO, in
// both policies, within a bounded number of device reads.
func TestAsyncReadPersistentError(t *testing.T) {
	for _, pol := range []sluice.Policy{sluice.Concurrent(), sluice.Classic()} {
		t.Run(pol.String(), func(t *testing.T) {
			e := newEnv(t, pol)
			e.prewrite("/f", 4*4096, 7)
			f := e.open("/f", 0)
			inj := e.fault.Inject(faultdev.OnOps(faultdev.Reads))
			r := e.ring(4, nil)
			buf := make([]byte, 4096)
			if err := r.Read(f, buf, 0, 0, 1); err != nil {
				t.Fatal(err)
			}
			out := make([]CQE, 1)
			n, _ := r.WaitTimeout(1, time.Second, out)
			if n == 0 {
				// Heal the device so the read, the ring and the file
				// system can finish, then report.
				inj.Remove()
				reap(t, r, 1)
				t.Fatalf("a buffered read of a page whose device read fails every time did not complete; the engine re-read it %d times in 1 s", inj.Injected())
			}
			if c := out[0]; !errors.Is(c.Err, syscall.EIO) || c.Res != 0 {
				t.Fatalf("read: %+v, want EIO", c)
			}
		})
	}
}

// A truncate that runs while an async read waits for its page: the read's
// retry finds the truncate holding the I/O lock, waits for it (punted), and
// sees the new size. Classic: the punted read holds the lock shared while it
// waits for the page, so the truncate waits for it and the read sees the
// old bytes.
func TestTruncateWhileReadQueued(t *testing.T) {
	for _, tc := range readPaths {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.pol)
			data := e.prewrite("/f", 4*4096, 9)
			f := e.open("/f", 0)
			g := e.gate(faultdev.Reads)
			r := e.ring(4, nil)
			buf := make([]byte, 4096)
			if err := r.Read(f, buf, 0, 0, 1); err != nil {
				t.Fatal(err)
			}
			gateHeld(t, g, 1)
			if tc.async {
				if st := r.Stats(); st.RetriesArmed != 1 {
					t.Fatalf("read not armed: %v", st)
				}
			} else {
				// The inline attempt and the worker's each took the
				// lock shared: the worker holds it now, waiting for the
				// page.
				waitFor(t, "the worker's read to hold the lock", func() bool {
					return e.fs.Counters()["LockSharedBufferedRead"] == 2
				})
			}
			if err := r.Truncate(f, 0, 2); err != nil {
				t.Fatal(err)
			}
			if tc.async {
				// The truncate holds the lock exclusive (and waits for
				// the page) before the read's retry can run.
				waitFor(t, "the truncate to hold the lock", func() bool {
					return e.fs.Counters()["LockExclSpace"] == 1
				})
			}
			g.Open()
			cqes := byTag(reap(t, r, 2))
			if c := cqes[2]; c.Err != nil {
				t.Fatalf("truncate: %+v", c)
			}
			c := cqes[1]
			if c.Err != nil {
				t.Fatalf("read: %+v", c)
			}
			if tc.async {
				if c.Res != 0 || c.Flags&CQERetried == 0 {
					t.Fatalf("read after truncate: %+v, want 0 bytes, retried", c)
				}
			} else {
				if c.Res != 4096 {
					t.Fatalf("read before truncate: %+v, want 4096 bytes", c)
				}
				checkBytes(t, "read", buf, data[:4096])
			}
			if a, _ := f.Stat(); a.Size != 0 {
				t.Fatalf("size %d after truncate", a.Size)
			}
		})
	}
}

// A caller's NOWAIT read of a cold page gets EAGAIN: no retry armed, no
// punt.
func TestNoWaitReadGetsEAGAIN(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	e.prewrite("/f", 4*4096, 1)
	f := e.open("/f", 0)
	g := e.gate(faultdev.Reads)
	r := e.ring(4, nil)
	if err := r.Read(f, make([]byte, 4096), 0, sluice.RWFNoWait, 1); err != nil {
		t.Fatal(err)
	}
	c := reap(t, r, 1)[0]
	if !errors.Is(c.Err, syscall.EAGAIN) || c.Res != 0 {
		t.Fatalf("NOWAIT read: %+v", c)
	}
	if st := r.Stats(); st.Punts != 0 || st.RetriesArmed != 0 || st.NoWaitEAGAIN != 1 {
		t.Fatalf("NOWAIT read: %v", st)
	}
	g.Open()
}
