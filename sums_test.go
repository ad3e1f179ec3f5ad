package sluice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
)

// Data checksums (sums.go).

func sumsEnv(t *testing.T, opts Options) *testEnv {
	t.Helper()
	return newEnv(t, envConfig{sums: true, opts: opts})
}

// wantCounters fails t unless each named counter of fs has the value given.
func wantCounters(t *testing.T, fs *FS, want map[string]int64) {
	t.Helper()
	c := fs.Counters()
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %d, want %d", k, c[k], v)
		}
	}
}

// TestDataChecksumsRoundTrip: every write path (aligned and sub-block
// direct writes, into holes and over written blocks, buffered writes,
// truncate's zeroing, punch) writes whole blocks, every read path
// (direct aligned and sub-block, buffered) verifies what it reads, and
// the checksums survive a reopen.
func TestDataChecksumsRoundTrip(t *testing.T) {
	e := sumsEnv(t, Options{})
	if !e.fs.DataChecksums() {
		t.Fatal("the volume has no data checksums")
	}
	d := e.mustCreate("/f", O_DIRECT)
	want := make([]byte, 0, 64<<10)
	write := func(f *File, p []byte, off int64) {
		t.Helper()
		if _, err := f.Pwrite(p, off, 0); err != nil {
			t.Fatal(err)
		}
		if end := off + int64(len(p)); int64(len(want)) < end {
			want = append(want, make([]byte, end-int64(len(want)))...)
		}
		copy(want[off:], p)
	}
	write(d, pattern(32<<10, 1), 0)   // into holes
	write(d, pattern(1024, 2), 5120)  // sub-block, over a pending conversion
	if err := d.Fsync(); err != nil { // durable written blocks from here
		t.Fatal(err)
	}
	write(d, pattern(8192, 3), 8192) // aligned overwrite
	write(d, pattern(512, 4), 20480) // sub-block overwrite
	b, err := e.fs.OpenFile("/f", O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	write(b, pattern(3000, 5), 1000) // buffered, partial blocks
	if err := b.Fsync(); err != nil {
		t.Fatal(err)
	}
	write(d, pattern(4096, 6), 40960) // past EOF: zeroes the gap
	if err := b.Truncate(41000); err != nil {
		t.Fatal(err)
	}
	want = want[:41000]
	if err := b.Fallocate(FallocPunchHole|FallocKeepSize, 2000, 9000); err != nil {
		t.Fatal(err)
	}
	clear(want[2000:11000])
	wantBytes(t, "direct", d, want)
	wantBytes(t, "buffered", b, want)
	sub := make([]byte, 512)
	if _, err := d.Pread(sub, 20480, 0); err != nil || !bytes.Equal(sub, want[20480:20992]) {
		t.Fatalf("sub-block direct read: %v", err)
	}
	wantCounters(t, e.fs, map[string]int64{"SumPartialWrites": 0, "SumMismatches": 0})
	if c := e.fs.Counters(); c["SumVerifiedBlocks"] == 0 || c["SumRewrites"] == 0 {
		t.Fatalf("verified %d blocks, rewrote %d", c["SumVerifiedBlocks"], c["SumRewrites"])
	}
	if err := b.Fsync(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, e.fs)
	d.Close()
	b.Close()
	e = e.reopen()
	f, err := e.fs.OpenFile("/f", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes(t, "after a reopen", f, want)
	wantCounters(t, e.fs, map[string]int64{"SumMismatches": 0})
	checkClean(t, e.fs)
}

// TestDataChecksumsDetectCorruption: a block corrupted on the device (a
// bit flipped in a read's data, or in the stored block) fails every read
// that reaches it with EIO, direct or buffered, is logged once per block,
// never leaves a page in the cache, and reads of other blocks go on; with
// NoVerifyDataChecksums the damaged data is returned.
func TestDataChecksumsDetectCorruption(t *testing.T) {
	var mu sync.Mutex
	var logged []string
	e := sumsEnv(t, Options{Logf: func(format string, args ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(format, args...))
		mu.Unlock()
	}})
	f := e.mustCreate("/f", O_DIRECT)
	data := pattern(16<<10, 7)
	if _, err := f.Pwrite(data, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	dev := int64(fileDevBlock(t, f, 1)) * 4096
	inj := e.fault.Inject(faultdev.CorruptRange(dev, 4096))
	buf := make([]byte, 16<<10)
	if _, err := f.Pread(buf, 0, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("direct read of a corrupted block: %v, want EIO", err)
	}
	if _, err := f.Pread(buf[:4096], 8192, 0); err != nil || !bytes.Equal(buf[:4096], data[8192:12288]) {
		t.Fatalf("direct read of the next block: %v", err)
	}
	b, err := e.fs.OpenFile("/f", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := b.Pread(buf[:100], 4096+10, 0); !errors.Is(err, syscall.EIO) {
			t.Fatalf("buffered read of a corrupted block: %v, want EIO", err)
		}
	}
	inj.Remove() // the device reads right again: nothing bad was cached
	if _, err := b.Pread(buf[:100], 4096+10, 0); err != nil || !bytes.Equal(buf[:100], data[4096+10:4096+110]) {
		t.Fatalf("buffered read once healed: %v", err)
	}
	mu.Lock()
	if len(logged) != 1 {
		t.Errorf("logged %d lines, want 1 (once per block): %q", len(logged), logged)
	}
	mu.Unlock()
	if c := e.fs.Counters(); c["SumMismatches"] < 3 {
		t.Errorf("SumMismatches = %d, want at least 3", c["SumMismatches"])
	}
	// Stored damage, read through a cold cache.
	b.Close()
	f.Close()
	e = e.reopen()
	if err := e.fault.CorruptStored(faultdev.Range{Off: dev, Len: 4096}, 0, 1); err != nil {
		t.Fatal(err)
	}
	b, err = e.fs.OpenFile("/f", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.Pread(buf, 0, 0); n != 4096 || err != nil {
		t.Fatalf("read up to stored damage after a reopen: %d, %v; want the 4096 bytes before it", n, err)
	}
	if _, err := b.Pread(buf, 4096, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of stored damage after a reopen: %v, want EIO", err)
	}
	if err := device.Flush(e.fault); err != nil { // the damage is what a copy holds
		t.Fatal(err)
	}
	salvage := openEnv(t, e.disks.Copy(), Options{NoVerifyDataChecksums: true, Logf: func(string, ...any) {}})
	g, err := salvage.fs.OpenFile("/f", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := g.Pread(buf, 0, 0); err != nil || n != len(buf) || bytes.Equal(buf, data) {
		t.Fatalf("NoVerifyDataChecksums: %d bytes, %v (want the damaged data)", n, err)
	}
}

// TestDataChecksumsNeverWriteInPlace: on a checksummed volume no write
// changes a block that holds data in place: an aligned direct overwrite,
// a sub-block one and a buffered one each move the block.
func TestDataChecksumsNeverWriteInPlace(t *testing.T) {
	e := sumsEnv(t, Options{})
	f := e.mustCreate("/f", O_DIRECT)
	if _, err := f.Pwrite(pattern(12<<10, 1), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	b, err := e.fs.OpenFile("/f", O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []func() error{
		func() error { _, err := f.Pwrite(pattern(4096, 2), 0, 0); return err },
		func() error { _, err := f.Pwrite(pattern(512, 3), 4096+512, 0); return err },
		func() error {
			if _, err := b.Pwrite(pattern(100, 4), 8192+100, 0); err != nil {
				return err
			}
			return b.Fsync()
		},
	} {
		before := fileDevBlock(t, f, uint64(i))
		if err := w(); err != nil {
			t.Fatal(err)
		}
		if after := fileDevBlock(t, f, uint64(i)); after == before {
			t.Errorf("write %d: file block %d still at device block %d", i, i, after)
		}
	}
	wantCounters(t, e.fs, map[string]int64{"SumPartialWrites": 0, "SumMismatches": 0})
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, e.fs)
}

// TestScrub: a scrub reads every written block of every file once (a
// hard-linked file once), skips holes and unwritten blocks, and names the
// file, offset and device block of stored damage, found online, while the
// file system serves; a volume without checksums verifies nothing.
func TestScrub(t *testing.T) {
	e := sumsEnv(t, Options{Logf: func(string, ...any) {}})
	if err := e.fs.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"/a", "/d/b", "/d/c"} {
		f := e.mustCreate(p, O_DIRECT)
		if _, err := f.Pwrite(pattern(16<<10, byte(i)), 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Fallocate(FallocKeepSize, 16<<10, 16<<10); err != nil { // unwritten: not read
			t.Fatal(err)
		}
		f.Close()
	}
	if err := e.fs.Link("/d/c", "/e"); err != nil {
		t.Fatal(err)
	}
	r, err := e.fs.Scrub(context.Background(), ScrubOptions{BytesPerSecond: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() || r.Files != 3 || r.Blocks != 12 || !r.DataChecksums {
		t.Fatalf("clean volume: %+v", r)
	}
	b, err := e.fs.OpenFile("/d/b", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := fileDevBlock(t, b, 2)
	if err := e.fault.CorruptStored(faultdev.Range{Off: int64(dev) * 4096, Len: 4096}, 0, 3); err != nil {
		t.Fatal(err)
	}
	r, err = e.fs.Scrub(context.Background(), ScrubOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []DamagedFile{{Path: "/d/b", Ino: b.Ino(), Blocks: []DamagedSpan{{Offset: 8192, DeviceBlock: dev}}}}
	if fmt.Sprint(r.Damaged) != fmt.Sprint(want) {
		t.Fatalf("damaged %+v, want %+v", r.Damaged, want)
	}
	plain := newEnv(t, envConfig{})
	if r, err := plain.fs.Scrub(context.Background(), ScrubOptions{}); err != nil || r.DataChecksums || r.Blocks != 0 {
		t.Fatalf("no checksums: %+v, %v", r, err)
	}
}

// TestDataChecksumsFlushAlone: writes that commit nothing (into blocks
// allocated ahead, whose conversions wait for the sync point) have their
// checksums committed in transactions of their own once sumFlushChunks
// chunks wait, so no transaction carries them all; what is durable after
// a sync reads back verified after a reopen.
func TestDataChecksumsFlushAlone(t *testing.T) {
	e := newEnv(t, envConfig{sums: true, size: 512 << 20})
	f := e.mustCreate("/f", O_DIRECT)
	const size = 320 << 20 // 81920 blocks: 1280 chunks
	if err := f.Fallocate(0, 0, size); err != nil {
		t.Fatal(err)
	}
	commits := e.fs.Counters()["MetaCommits"]
	buf := pattern(1<<20, 5)
	for off := int64(0); off < size; off += 1 << 20 {
		if _, err := f.Pwrite(buf, off, 0); err != nil {
			t.Fatal(err)
		}
	}
	waitForCond(t, func() bool { return !e.fs.sumFlushing.Load() })
	if e.fs.Counters()["MetaCommits"] == commits {
		t.Fatal("no transaction committed the checksums of 1280 chunks")
	}
	if d := e.fs.sums.Dirty(); d > sumFlushChunks {
		t.Fatalf("%d chunks wait for a transaction", d)
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e = e.reopen()
	g, err := e.fs.OpenFile("/f", O_RDONLY|O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := device.AlignedBuf(1 << 20)
	if _, err := g.Pread(got, size-(1<<20), 0); err != nil || !bytes.Equal(got, buf) {
		t.Fatalf("the last MiB after a reopen: %v", err)
	}
}

func waitForCond(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 10000 {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
