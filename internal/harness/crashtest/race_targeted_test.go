package crashtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
)

// Two writebacks of one unwritten block that overlap in time must not let
// the older one's copy of the block land last. With 16 KiB blocks and
// 4 KiB pages, the writeback of an unwritten block writes the whole block
// from a copy of all its cached pages, including pages other writebacks
// own: if a page is written after that copy and written back by a second
// writeback that reaches the device first, the first writeback's stale
// copy lands over it, and the page, clean in the cache, never goes out
// again. A gate holds the first writeback's device write to make the
// interleaving exact.
func TestTargetedConcurrentWritebackOfOneBlock(t *testing.T) {
	c := newChecker(t)
	const bs, ps = 16384, 4096
	env, err := NewEnv(EnvConfig{BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	fs := env.FS
	f, err := fs.OpenFile("/a", sluice.O_RDWR|sluice.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := func(seq uint64, off int64) []byte {
		b := device.AlignedBuf(ps)
		for i := int64(0); i < ps; i += SectorSize {
			fillSector(b[i:i+SectorSize], Tag{File: 7, Seq: seq, Off: off + i})
		}
		return b
	}
	// A: page 2 of block 0 (a hole), dirty in the cache.
	if _, err := f.WriteAt(page(1, 2*ps), 2*ps); err != nil {
		t.Fatal(err)
	}
	// Writeback 1 (an fsync) copies the block (page 0 absent: zeros),
	// allocates it unwritten and writes it whole: held at the gate.
	gate := env.Fault.NewGate(faultdev.Nth(1, faultdev.PredicateFunc(func(io faultdev.IO) bool {
		return io.Op == device.OpWrite && io.Len == bs
	})))
	defer gate.Remove()
	fsynced := make(chan error, 1)
	go func() { fsynced <- f.Fsync() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gate.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// B: page 0, written after writeback 1 copied the block.
	if _, err := f.WriteAt(page(2, 0), 0); err != nil {
		t.Fatal(err)
	}
	// Writeback 2 (a direct read of page 0 writes it back first) copies
	// the block again (B and A) and writes it whole: it reaches the device
	// first.
	g, err := fs.OpenFile("/a", sluice.O_RDONLY|sluice.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	buf := device.AlignedBuf(ps)
	readDone := make(chan error, 1)
	go func() { _, err := g.ReadAt(buf, 0); readDone <- err }()
	select {
	case err := <-readDone:
		// Writeback 2 overtook writeback 1: the race is possible.
		if err != nil {
			t.Fatal(err)
		}
		if k, tag := decodeSector(buf[:SectorSize]); k != Tagged || tag.Seq != 2 {
			t.Fatalf("direct read of page 0 before the release: %s", describeSector(k, tag))
		}
		gate.Open() // writeback 1's stale copy lands now
	case <-time.After(300 * time.Millisecond):
		// The engine serialises writebacks of one block: writeback 2
		// waits for writeback 1, so the older copy cannot land last.
		gate.Open()
		if err := <-readDone; err != nil {
			t.Fatal(err)
		}
		if k, tag := decodeSector(buf[:SectorSize]); k != Tagged || tag.Seq != 2 {
			c.errorf("direct read of page 0 after both writebacks: %s", describeSector(k, tag))
		}
	}
	select {
	case err := <-fsynced:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("fsync did not finish")
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if k, tag := decodeSector(buf[:SectorSize]); k != Tagged || tag.Seq != 2 {
		c.errorf("after both writebacks and an fsync, a direct read of page 0 shows %s, not the write made before the fsync (lost write, no crash needed)",
			describeSector(k, tag))
	}
	// And after a crash.
	img, err := env.Crash(0, nil, MetaCrash{UpTo: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := img.Open(env.Opts)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	got, err := readAll(next.FS, "/a", 3*ps, sluice.O_DIRECT)
	if err != nil {
		t.Fatal(err)
	}
	if k, tag := decodeSector(got[:SectorSize]); k != Tagged || tag.Seq != 2 {
		c.errorf("after a crash, page 0 (fsynced) shows %s", describeSector(k, tag))
	}
}

// A page rewritten while its writeback is in flight is written back again
// while the first write is still in flight: the two device writes of the
// same sectors are unordered, and the older may land last. Here the first
// is held at a gate until the second has completed; the fsync that
// returns after both then leaves the older data on the device.
func TestTargetedRewriteDuringWriteback(t *testing.T) {
	c := newChecker(t)
	const bs = 4096
	env, err := NewEnv(EnvConfig{BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	fs := env.FS
	f, err := fs.OpenFile("/a", sluice.O_RDWR|sluice.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := func(seq uint64) []byte {
		b := device.AlignedBuf(bs)
		for i := int64(0); i < bs; i += SectorSize {
			fillSector(b[i:i+SectorSize], Tag{File: 7, Seq: seq, Off: i})
		}
		return b
	}
	if _, err := f.WriteAt(page(1), 0); err != nil {
		t.Fatal(err)
	}
	gate := env.Fault.NewGate(faultdev.Nth(1, faultdev.PredicateFunc(func(io faultdev.IO) bool {
		return io.Op == device.OpWrite && io.Len == bs
	})))
	defer gate.Remove()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fsync1 := make(chan error, 1)
	go func() { fsync1 <- f.Fsync() }() // writeback 1: page 0 = write 1, held
	if err := gate.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() { _, err := f.WriteAt(page(2), 0); wrote <- err }()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		// The write waits for the writeback (stable pages): the race
		// cannot happen.
		gate.Open()
		<-wrote
		<-fsync1
		t.Log("a write to a page under writeback waits for it: fine")
		return
	}
	before := env.Fault.Stats().Write.Completed
	fsync2 := make(chan error, 1)
	go func() { fsync2 <- f.Fsync() }() // writeback 2: page 0 = write 2
	for env.Fault.Stats().Write.Completed == before {
		select {
		case <-ctx.Done():
			gate.Open()
			t.Log("the second writeback waits for the first: fine")
			return
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-fsync2:
		// It returned while the older write of the same page is still
		// in flight: its promise already depends on the device order.
		if err != nil {
			t.Fatal(err)
		}
		t.Log("the second fsync returned while the first writeback of the same page was still in flight")
		fsync2 <- nil
	case <-time.After(100 * time.Millisecond):
	}
	gate.Open() // writeback 1's older copy lands last
	for _, ch := range []chan error{fsync1, fsync2} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	g, err := fs.OpenFile("/a", sluice.O_RDONLY|sluice.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	buf := device.AlignedBuf(bs)
	if _, err := g.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if k, tag := decodeSector(buf[:SectorSize]); k != Tagged || tag.Seq != 2 {
		c.errorf("after both fsyncs, a direct read shows %s, not write 2 (made before the second fsync): lost write", describeSector(k, tag))
	}
}

// An O_DIRECT write of one page of a block that is not allocated yet, while
// another page of the block is dirty in the cache (pages smaller than
// blocks), writes the whole block: its data and zeros around it. If an
// fsync writes the dirty page back meanwhile, the writeback allocates
// nothing (the direct write did) and writes the whole block too, from the
// cache: the page, and zeros where the direct write's data goes. Both
// writes of the block are in flight at once, and the one that lands last
// wins: the direct write's data or the buffered page (then clean in the
// cache, never written again) was lost, without a crash, until the direct
// write wrote back and dropped the cached pages of the whole blocks it
// touches first. Gates hold both block writes and let them land in either
// order. TestTargetedConcurrentAppends (mixed direct and buffered
// appenders, 16 KiB blocks) found it.
func TestTargetedDirectWriteVsWritebackOfOneBlock(t *testing.T) {
	const bs, ps = 16384, 4096
	for _, writebackLast := range []bool{true, false} {
		name := "direct-write-lands-last"
		if writebackLast {
			name = "writeback-lands-last"
		}
		t.Run(name, func(t *testing.T) {
			c := newChecker(t)
			env, err := NewEnv(EnvConfig{BlockSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			defer env.Close()
			fs := env.FS
			b, err := fs.OpenFile("/a", sluice.O_RDWR|sluice.O_CREAT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			d, err := fs.OpenFile("/a", sluice.O_RDWR|sluice.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			page := func(seq uint64, off int64) []byte {
				p := device.AlignedBuf(ps)
				for i := int64(0); i < ps; i += SectorSize {
					fillSector(p[i:i+SectorSize], Tag{File: 7, Seq: seq, Off: off + i})
				}
				return p
			}
			// Page 0 of block 0, buffered: dirty, no block yet.
			if _, err := b.WriteAt(page(1, 0), 0); err != nil {
				t.Fatal(err)
			}
			wholeBlock := func() *faultdev.Gate {
				return env.Fault.NewGate(faultdev.Nth(1, faultdev.PredicateFunc(func(io faultdev.IO) bool {
					return io.Op == device.OpWrite && io.Len == bs
				})))
			}
			// Gates are passed in order: the direct write's block write
			// stops at the first; the writeback's passes it and stops at
			// the second.
			direct := wholeBlock()
			defer direct.Remove()
			writeback := wholeBlock()
			defer writeback.Remove()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// Page 1 of block 0, O_DIRECT (extending the file).
			wrote := make(chan error, 1)
			go func() { _, err := d.WriteAt(page(2, ps), ps); wrote <- err }()
			if err := direct.WaitHeld(ctx, 1); err != nil {
				t.Fatal(err)
			}
			fsynced := make(chan error, 1)
			go func() { fsynced <- b.Fsync() }()
			short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
			defer cancelShort()
			if err := writeback.WaitHeld(short, 1); err != nil {
				// The writeback waits for the direct write: no race.
				direct.Open()
				writeback.Open()
				t.Log("the writeback of the block waits for the direct write in flight: fine")
			} else {
				first, last := direct, writeback
				if !writebackLast {
					first, last = writeback, direct
				}
				first.Open()
				time.Sleep(20 * time.Millisecond) // let it land
				last.Open()
			}
			for _, ch := range []chan error{wrote, fsynced} {
				select {
				case err := <-ch:
					if err != nil {
						t.Fatal(err)
					}
				case <-ctx.Done():
					t.Fatal("the direct write or the fsync did not finish")
				}
			}
			if err := b.Fsync(); err != nil {
				t.Fatal(err)
			}
			got, err := readAll(fs, "/a", 2*ps, sluice.O_DIRECT)
			if err != nil {
				t.Fatal(err)
			}
			for i, what := range []string{"the buffered write of page 0", "the O_DIRECT write of page 1"} {
				if k, tag := decodeSector(got[i*ps : i*ps+SectorSize]); k != Tagged || tag.Seq != uint64(i+1) {
					c.errorf("after both writes and two fsyncs, a direct read of page %d shows %s, not %s (lost write, no crash needed)",
						i, describeSector(k, tag), what)
				}
			}
		})
	}
}

// With SharedDirectReads and ParallelAppends, an O_DIRECT read runs beside
// buffered appends: it writes back the cached pages of its range, then
// reads the size. A buffered append that copies its pages and publishes
// its size in between is inside the size the read then sees, but only in
// the cache: the read took its range from the device, a hole, and returned
// zeros inside the size, until the read was clipped to the size sampled
// before its writeback. A gate holds the read's writeback while a buffered
// append runs. (Without SharedDirectReads the read takes the lock
// exclusive, invalidates the file and demotes the lock: it read the size
// after the demote, and a buffered append could publish in between, rarely;
// TestTargetedConcurrentAppends met that under load.)
func TestTargetedDirectReadVsBufferedAppend(t *testing.T) {
	c := newChecker(t)
	const rec = 4096
	env, err := NewEnv(EnvConfig{BlockSize: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	fs := env.FS
	b, err := fs.OpenFile("/a", sluice.O_RDWR|sluice.O_CREAT|sluice.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d, err := fs.OpenFile("/a", sluice.O_RDONLY|sluice.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := b.Write(recordBuf(1, rec)); err != nil { // dirty in the cache
		t.Fatal(err)
	}
	gate := env.Fault.NewGate(faultdev.Nth(1, faultdev.Writes))
	defer gate.Remove()
	buf := device.AlignedBuf(16 * rec)
	type result struct {
		n   int
		err error
	}
	read := make(chan result, 1)
	go func() { n, err := d.Pread(buf, 0, 0); read <- result{n, err} }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gate.WaitHeld(ctx, 1); err != nil { // the read's writeback of record 1
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() { _, err := b.Write(recordBuf(2, rec)); wrote <- err }()
	select {
	case err := <-wrote:
		wrote <- err
	case <-time.After(500 * time.Millisecond):
		t.Log("the buffered append waits for the direct read: fine")
	}
	gate.Open()
	r := <-read
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < r.n/rec; i++ {
		if kind, _, msg := classifySlot(buf[i*rec:(i+1)*rec], uint64(i+1)); kind != slotRecord {
			c.errorf("a direct read that returned %d bytes shows record %d (an append that had returned or was published) as %v %s", r.n, i+1, kind, msg)
		}
	}
}

// With SkipFullPageRMW, buffered appends of 512 B records from two
// goroutines (RWFDsync: writeback at every append), O_DIRECT appends from a
// third and buffered reads of the whole file from a fourth, on a device
// whose writes take up to 200µs, lost buffered records: the file at the
// end read zeros where they were (no crash; the engine before parallel
// appends too, and with ParallelAppends off), until a page read from the
// device waited for the page's writeback. Not a script: the race is
// between the reads' page fills and writeback; a run lost records about
// half the time, so the test makes up to ten.
func TestTargetedAppendsWithBufferedReader(t *testing.T) {
	c := newChecker(t)
	const rec, perAppender = 512, 60
	pol := sluice.Seeds()
	for run := range 10 {
		lost := appendsWithReader(t, pol, rec, perAppender, uint64(run))
		if lost != "" {
			c.errorf("run %d (policy %s): %s", run, pol, lost)
			return
		}
	}
}

// appendsWithReader runs one TestTargetedAppendsWithBufferedReader and
// describes the records the file lost, if any.
func appendsWithReader(t *testing.T, pol sluice.Policy, rec int64, perAppender int, seed uint64) string {
	env, err := NewEnv(EnvConfig{BlockSize: 4096, Options: sluice.Options{Policy: &pol}})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	fs := env.FS
	env.Fault.SetLatency(faultdev.Writes, faultdev.Uniform(0, 200*time.Microsecond, seed))
	lf, err := fs.OpenFile("/log", sluice.O_RDWR|sluice.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	total := 3 * int64(perAppender)
	stop := make(chan struct{})
	var reader, appenders sync.WaitGroup
	rf, err := fs.OpenFile("/log", sluice.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	reader.Add(1)
	go func() {
		defer reader.Done()
		buf := device.AlignedBuf(int(total*rec) + 4096)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := rf.Pread(buf, 0, 0); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 3 {
		direct := i == 2
		flags := sluice.O_RDWR | sluice.O_APPEND
		var rwf sluice.RWFlags = sluice.RWFDsync
		if direct {
			flags, rwf = flags|sluice.O_DIRECT, 0
		}
		f, err := fs.OpenFile("/log", flags, 0)
		if err != nil {
			t.Fatal(err)
		}
		appenders.Add(1)
		go func() {
			defer appenders.Done()
			defer f.Close()
			for n := range perAppender {
				if _, err := f.Pwrite(recordBuf(uint64(i+1)<<32|uint64(n+1), rec), 0, rwf); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	appenders.Wait()
	close(stop)
	reader.Wait()
	if err := lf.Fsync(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(fs, "/log", total*rec, sluice.O_DIRECT)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	var zeros []string
	for k := range total {
		kind, id, msg := classifySlot(got[k*rec:(k+1)*rec], 0)
		if kind != slotRecord {
			zeros = append(zeros, fmt.Sprintf("record %d (offset %d) reads %v %s", k, k*rec, kind, msg))
			continue
		}
		seen[id] = true
	}
	if len(zeros) == 0 {
		return ""
	}
	var lost []string
	for i := range 3 {
		for n := range perAppender {
			if id := uint64(i+1)<<32 | uint64(n+1); !seen[id] {
				lost = append(lost, recName(id))
			}
		}
	}
	return fmt.Sprintf("after an fsync, %s; records lost (appenders a1 and a2 buffered with RWFDsync, a3 O_DIRECT): %v", strings.Join(zeros, ", "), lost)
}
