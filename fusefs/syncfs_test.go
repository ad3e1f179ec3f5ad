package fusefs

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/device/memdev"
)

// TestSyncFS: data written buffered through the engine, a new file and a
// new directory survive a power failure right after SYNCFS, one that drops
// every write not flushed and every metadata block not synced. Without
// SYNCFS the same crash loses them, so the check can fail.
func TestSyncFS(t *testing.T) {
	for _, sync := range []bool{true, false} {
		name := "syncfs"
		if !sync {
			name = "nosync"
		}
		t.Run(name, func(t *testing.T) {
			// No background sync point or writeback during the test.
			engOpts := sluice.Options{SyncInterval: time.Hour, WritebackAge: time.Hour}
			e := newRawEnv(t, engOpts, Options{Cache: SluiceCache})
			id, fh := e.create("f", syscall.O_RDWR, 0o644)
			want := pattern(300<<10+123, 5) // buffered: the engine's page cache
			e.write(id, fh, want, 0)
			var dir fuse.EntryOut
			if st := e.fs.Mkdir(nil, &fuse.MkdirIn{InHeader: rootHeader(), Mode: 0o755}, "d", &dir); !st.Ok() {
				t.Fatal(st)
			}
			if sync {
				h := rootHeader()
				if st := e.fs.SyncFS(nil, &h); !st.Ok() {
					t.Fatalf("SyncFS: %v", st)
				}
			}
			drop := func(memdev.PendingWrite) memdev.Fate { return memdev.Fate{Kind: memdev.Drop} }
			c := openRawEnv(t, e.disks.CrashWith(drop, 1, 0), engOpts, Options{})
			a, ferr := c.eng.Lookup(sluice.RootIno, "f")
			_, derr := c.eng.Lookup(sluice.RootIno, "d")
			if !sync {
				if ferr == nil && derr == nil && bytes.Equal(c.contents(uint64(a.Ino)), want) {
					t.Fatal("everything survived a crash without SYNCFS: the test cannot tell SYNCFS works")
				}
				return
			}
			if ferr != nil || derr != nil {
				t.Fatalf("after SYNCFS and a crash: lookup f: %v, lookup d: %v", ferr, derr)
			}
			if got := c.contents(uint64(a.Ino)); !bytes.Equal(got, want) {
				t.Fatalf("after SYNCFS and a crash f has %d bytes, differing from what was written", len(got))
			}
			r, err := c.eng.Check()
			if err != nil || !r.Clean() {
				t.Fatalf("check after the crash: %v %v", err, r.Problems)
			}
		})
	}
}

// TestSyncFSError: SYNCFS is counted in the metrics, and a sync point
// that fails (the device refuses the flush) answers EIO and is logged.
func TestSyncFSError(t *testing.T) {
	m := NewMetrics()
	e := newRawEnv(t, sluice.Options{SyncInterval: time.Hour}, Options{Metrics: m})
	h := rootHeader()
	if st := e.fs.SyncFS(nil, &h); !st.Ok() {
		t.Fatal(st)
	}
	id, fh := e.create("f", syscall.O_RDWR, 0o644)
	e.write(id, fh, pattern(8192, 1), 0)
	e.failedOK = true
	e.fault.Inject(&faultdev.Fault{When: faultdev.Flushes})
	if st := e.fs.SyncFS(nil, &h); st != fuse.EIO {
		t.Fatalf("SyncFS with failing flushes: %v, want EIO", st)
	}
	if !strings.Contains(e.logs.String(), "syncfs") {
		t.Errorf("the failure was not logged; log:\n%s", e.logs.String())
	}
	if n := m.ops[opSyncfs].count.Load(); n != 2 {
		t.Fatalf("SYNCFS count %d, want 2", n)
	}
}
