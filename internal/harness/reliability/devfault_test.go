package reliability

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/faultdev"
)

// Part 2: device faults. faultdev fails reads, writes and flushes at
// chosen or seeded points; each error must reach the caller of the read,
// write or fsync concerned (a buffered write's at fsync), a failed fsync
// must never be followed by a successful one for data that is not on the
// device, the volume must stay consistent, and other files must keep
// working.

// writeDurable creates path with n bytes of pattern seed written O_DIRECT
// and fsynced, and returns the data and the device offset of its first
// block.
func (e *env) writeDurable(path string, n int, seed uint64) ([]byte, int64) {
	e.t.Helper()
	f := e.create(path, sluice.O_DIRECT)
	defer f.Close()
	data := pattern(n, seed)
	if _, err := f.WriteAt(data, 0); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		e.t.Fatal(err)
	}
	dev := findOnDevice(e.t, e.disks.Mem, data[:4096])
	if dev < 0 {
		e.t.Fatalf("%s: data not found on the device", path)
	}
	return data, dev
}

// TestDeviceFaultDirectRead: a direct read whose device read fails returns
// EIO; once the device heals, the same read returns the data.
func TestDeviceFaultDirectRead(t *testing.T) {
	e := newEnv(t, envConfig{})
	data, dev := e.writeDurable("/a", 64<<10, 1)
	f := e.open("/a", sluice.O_RDONLY|sluice.O_DIRECT)
	defer f.Close()
	for _, tc := range []struct {
		name string
		inj  faultdev.Injector
	}{
		{"nth", faultdev.OnNth(faultdev.Reads, 1)},
		{"range", faultdev.OnRange(faultdev.Reads, dev+16<<10, 512)},
		{"every", faultdev.OnOps(faultdev.Reads)},
	} {
		i := e.dev.Inject(tc.inj)
		buf := pattern(32<<10, 0)
		n, err := f.ReadAt(buf, 8<<10)
		i.Remove()
		if !isEIO(err) || n != 0 {
			t.Errorf("%s: direct read on a failing device: n=%d err=%v, want 0, EIO", tc.name, n, err)
		}
		if _, err := f.ReadAt(buf, 8<<10); err != nil || !bytes.Equal(buf, data[8<<10:40<<10]) {
			t.Errorf("%s: after healing: err=%v, data equal %v", tc.name, err, bytes.Equal(buf, data[8<<10:40<<10]))
		}
	}
	checkClean(t, e.fs)
}

// TestDeviceFaultBufferedReadEIO: a buffered read of pages that are not
// cached, on a device that fails every read, returns EIO (in bounded time);
// once the device heals, it returns the data.
func TestDeviceFaultBufferedReadEIO(t *testing.T) {
	e := newEnv(t, envConfig{})
	data, _ := e.writeDurable("/a", 64<<10, 1)
	e = e.reopen() // cold cache
	// Not closed here: a read stuck in the engine would hold Close; the
	// environment's cleanup closes the file system with a timeout.
	f := e.open("/a", sluice.O_RDONLY)
	// A single failure may be retried (Linux retries a failed readahead
	// page once, synchronously): the read returns EIO or the data.
	i := e.dev.Inject(faultdev.OnNth(faultdev.Reads, 1))
	buf := make([]byte, 4096)
	var n int
	var err error
	if !withTimeout(t, 10*time.Second, "buffered read with one failing device read", func() { n, err = f.ReadAt(buf, 8192) }) {
		return
	}
	i.Remove()
	if err != nil && !isEIO(err) || err == nil && !bytes.Equal(buf[:n], data[8192:12288]) {
		t.Errorf("buffered read with one failing device read: n=%d err=%v (data equal %v), want EIO or the data", n, err, bytes.Equal(buf[:n], data[8192:12288]))
	}

	i = e.dev.Inject(faultdev.OnOps(faultdev.Reads))
	if !withTimeout(t, 10*time.Second, "buffered read on a device that fails every read", func() { n, err = f.ReadAt(buf, 32768) }) {
		return
	}
	i.Remove()
	if !isEIO(err) {
		t.Errorf("buffered read on a failing device: n=%d err=%v, want EIO", n, err)
	}
	if _, err := f.ReadAt(buf, 32768); err != nil || !bytes.Equal(buf, data[32768:36864]) {
		t.Errorf("after healing: %v", err)
	}
}

// TestDeviceFaultReadAtShortIsNotEOF: File.ReadAt (io.ReaderAt) that
// meets a device error after copying some bytes must not report io.EOF
// inside the file: a caller would take the file as ending there.
// (Pread may return the short count, as pread(2) does.)
func TestDeviceFaultReadAtShortIsNotEOF(t *testing.T) {
	e := newEnv(t, envConfig{})
	data, dev := e.writeDurable("/a", 64<<10, 1)
	e = e.reopen()
	f := e.open("/a", sluice.O_RDONLY)
	defer f.Close()
	i := e.dev.Inject(faultdev.OnRange(faultdev.Reads, dev+32<<10, 4096))
	buf := make([]byte, 64<<10)
	n, err := f.ReadAt(buf, 0)
	i.Remove()
	if err == nil && n == len(buf) {
		return // the failing page was read some other way: nothing to check
	}
	if !bytes.Equal(buf[:n], data[:n]) {
		t.Errorf("ReadAt returned %d wrong bytes", n)
	}
	if errors.Is(err, io.EOF) {
	}
	if !isEIO(err) {
		t.Errorf("ReadAt of a 64 KiB file whose 9th page fails: n=%d err=%v, want EIO", n, err)
	}
}

// TestDeviceFaultReadErrorNotSticky: a read error met by a partial-page
// buffered write (which must read the page first) is returned to that
// write, and is not returned again by later reads once the device works.
func TestDeviceFaultReadErrorNotSticky(t *testing.T) {
	e := newEnv(t, envConfig{})
	data, _ := e.writeDurable("/a", 16<<10, 1)
	e = e.reopen()
	f := e.open("/a", sluice.O_RDWR)
	defer f.Close()
	i := e.dev.Inject(faultdev.OnNth(faultdev.Reads, 1))
	_, err := f.WriteAt([]byte("hello"), 100)
	i.Remove()
	if !isEIO(err) {
		t.Fatalf("partial-page write whose read-before-write fails: %v, want EIO", err)
	}
	buf := make([]byte, 4096)
	_, err = f.ReadAt(buf, 0)
	if err != nil {
		t.Fatalf("read after the device healed: %v", err)
	}
	if !bytes.Equal(buf, data[:4096]) {
		t.Errorf("read after the device healed returns wrong data")
	}
}

// TestDeviceFaultDirectWrite: a direct write whose device write fails
// returns EIO and publishes nothing (no size change, no stale block made
// visible: the range reads as before); the write then succeeds once the
// device heals and survives a crash after fsync.
func TestDeviceFaultDirectWrite(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			e := newEnv(t, envConfig{})
			old, _ := e.writeDurable("/a", 16<<10, seed)
			f := e.open("/a", sluice.O_RDWR|sluice.O_DIRECT)
			defer f.Close()
			// Seeds: overwrite of written blocks, extension into a hole,
			// sub-block write, write into fallocated space.
			off, n := []int64{4096, 16 << 10, 512, 64 << 10}[seed-1], []int{8192, 12288, 1024, 8192}[seed-1]
			if seed == 4 {
				if err := f.Fallocate(sluice.FallocKeepSize, 64<<10, 64<<10); err != nil {
					t.Fatal(err)
				}
			}
			want := append([]byte(nil), old...)
			i := e.dev.Inject(faultdev.OnOps(faultdev.Writes))
			buf := pattern(n, 100+seed)
			got, err := f.WriteAt(buf, off)
			i.Remove()
			if !isEIO(err) || got != 0 {
				t.Fatalf("direct write on a failing device: n=%d err=%v, want 0, EIO", got, err)
			}
			if a, _ := f.Stat(); a.Size != int64(len(old)) {
				t.Errorf("size %d after a failed write, want %d", a.Size, len(old))
			}
			// The device had the write refused: the range reads as before.
			if r, err := readAll(f); err != nil || !bytes.Equal(r, want) {
				t.Errorf("content after a failed write differs (err %v)", err)
			}
			if _, err := f.WriteAt(buf, off); err != nil {
				t.Fatalf("after healing: %v", err)
			}
			if end := off + int64(n); end > int64(len(want)) {
				want = append(want, make([]byte, end-int64(len(want)))...)
			}
			copy(want[off:], buf)
			if err := f.Fsync(); err != nil {
				t.Fatal(err)
			}
			checkClean(t, e.fs)
			e2 := e.crash(seed)
			if r, err := readFile(e2.fs, "/a"); err != nil || !bytes.Equal(r, want) {
				t.Errorf("after a crash: content differs (err %v)", err)
			}
			checkClean(t, e2.fs)
		})
	}
}

// TestDeviceFaultBufferedWriteSurfacesAtFsync: buffered writes succeed
// into the cache; the writeback error reaches fsync, and keeps reaching it
// while the device fails (the pages stay dirty: fsyncgate); once the
// device heals, fsync succeeds and the data is really on the device (a
// crash image taken right after shows it). Both for writeback started by
// fsync and by the background flusher.
func TestDeviceFaultBufferedWriteSurfacesAtFsync(t *testing.T) {
	for _, background := range []bool{false, true} {
		t.Run(fmt.Sprintf("flusher=%v", background), func(t *testing.T) {
			opts := sluice.Options{}
			if background {
				opts.WritebackAge = 5 * time.Millisecond
			}
			e := newEnv(t, envConfig{opts: opts})
			old, _ := e.writeDurable("/a", 16<<10, 1)
			f := e.open("/a", sluice.O_RDWR)
			defer f.Close()
			i := e.dev.Inject(faultdev.OnOps(faultdev.Writes))
			data := pattern(24<<10, 2) // overwrites and extends
			if _, err := f.WriteAt(data, 8192); err != nil {
				t.Fatalf("buffered write: %v", err)
			}
			want := append(old[:8192:8192], data...)
			if background {
				deadline := time.Now().Add(10 * time.Second)
				for i.Injected() == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if i.Injected() == 0 {
					t.Fatal("the flusher never tried to write back")
				}
			}
			for k := range 2 {
				if err := f.Fsync(); !isEIO(err) {
					t.Fatalf("fsync %d on a failing device: %v, want EIO", k+1, err)
				}
			}
			// The cache still serves the new data.
			if r, err := readAll(f); err != nil || !bytes.Equal(r, want) {
				t.Errorf("read after failed writebacks differs (err %v)", err)
			}
			i.Remove()
			err := f.Fsync()
			if background && isEIO(err) {
				// A writeback the flusher had started before the device
				// healed may fail after it: its error is reported once,
				// to this fsync, and the pages stay dirty for the next.
				err = f.Fsync()
			}
			if err != nil {
				t.Fatalf("fsync after healing: %v", err)
			}
			e2 := e.crash(3)
			if r, err := readFile(e2.fs, "/a"); err != nil || !bytes.Equal(r, want) {
				t.Errorf("after fsync and a crash: content differs (err %v, len %d)", err, len(r))
			}
			checkClean(t, e2.fs)
		})
	}
}

// TestDeviceFaultDsyncWrite: an O_DSYNC buffered write and an O_DSYNC
// direct write on a device whose writes (or flushes) fail return EIO.
func TestDeviceFaultDsyncWrite(t *testing.T) {
	for _, ops := range []faultdev.Ops{faultdev.Writes, faultdev.Flushes} {
		for _, direct := range []int{0, sluice.O_DIRECT} {
			e := newEnv(t, envConfig{})
			f := e.create("/a", sluice.O_DSYNC|direct)
			i := e.dev.Inject(faultdev.OnOps(ops))
			_, err := f.WriteAt(pattern(8192, 1), 0)
			i.Remove()
			if !isEIO(err) {
				t.Errorf("%v, direct=%v: O_DSYNC write: %v, want EIO", ops, direct != 0, err)
			}
			f.Close()
			checkClean(t, e.fs)
		}
	}
}

// TestDeviceFaultFlush: an fsync whose device flush fails returns EIO.
// After healing, a later fsync may fail too (a file system that shuts down
// on a failed flush) but if it succeeds the data must be durable. (With
// faultdev the failed flush never reaches memdev, whose cache still holds
// the writes, so a later flush does make them durable; lossyDev is the
// harsher drive, see TestDeviceFaultFlushIsNotForgotten.)
func TestDeviceFaultFlush(t *testing.T) {
	for _, direct := range []int{0, sluice.O_DIRECT} {
		e := newEnv(t, envConfig{})
		f := e.create("/a", direct)
		data := pattern(16<<10, 7)
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		i := e.dev.Inject(faultdev.OnOps(faultdev.Flushes))
		if err := f.Fsync(); !isEIO(err) {
			t.Errorf("direct=%v: fsync with a failing flush: %v, want EIO", direct != 0, err)
		}
		i.Remove()
		if err := f.Fsync(); err != nil {
			if !isEIO(err) {
				t.Errorf("direct=%v: fsync after healing: %v, want nil or EIO", direct != 0, err)
			}
			if err := e.fs.SyncAll(); err == nil {
				t.Errorf("direct=%v: SyncAll succeeded after an fsync that failed after healing", direct != 0)
			}
			f.Close()
			continue
		}
		f.Close()
		e2 := e.crash(11)
		if r, err := readFile(e2.fs, "/a"); err != nil || !bytes.Equal(r, data) {
			t.Errorf("direct=%v: after fsync and a crash: content differs (err %v)", direct != 0, err)
		}
		checkClean(t, e2.fs)
	}
}

// TestDeviceFaultFlushIsNotForgotten: on a drive whose failed flush loses
// its write cache (lossyDev: the device contract taken literally), an fsync
// that follows a failed one may only succeed if the data is really on the
// device. The blocks the file gets were a deleted file's, so the test also
// sees whether a crash exposes that file's bytes (the engine promises
// zeros at worst).
func TestDeviceFaultFlushIsNotForgotten(t *testing.T) {
	for _, direct := range []int{0, sluice.O_DIRECT} {
		t.Run(fmt.Sprintf("direct=%v", direct != 0), func(t *testing.T) {
			e := newEnv(t, envConfig{lossy: true, size: 4 << 20})
			secret := pattern(1<<20, 99)
			x := e.create("/secret", sluice.O_DIRECT)
			for off := int64(0); off < 3<<20; off += 1 << 20 {
				if _, err := x.WriteAt(secret, off); err != nil {
					t.Fatal(err)
				}
			}
			if err := x.Fsync(); err != nil {
				t.Fatal(err)
			}
			x.Close()
			if err := e.fs.Unlink("/secret"); err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second makes the freed blocks reusable
				if err := e.fs.SyncAll(); err != nil {
					t.Fatal(err)
				}
			}
			f := e.create("/a", direct)
			data := pattern(64<<10, 3)
			if _, err := f.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			e.lossy.FailFlushes(1)
			if err := f.Fsync(); !isEIO(err) {
				t.Fatalf("fsync with a failing flush: %v, want EIO", err)
			}
			if e.lossy.Lost() == 0 {
				t.Fatal("the failed flush lost nothing: test setup")
			}
			err := f.Fsync()
			if err != nil {
				if !isEIO(err) {
					t.Errorf("second fsync: %v, want nil or EIO", err)
				}
				return // refusing to claim durability is correct
			}
			// fsync said the data is durable: it must be.
			e2 := e.crash(5)
			got, rerr := readFile(e2.fs, "/a")
			if rerr == nil && bytes.Equal(got, data) {
				return
			}
			leak := len(got) >= 4096 && bytes.Contains(secret, got[:4096])
			t.Errorf("fsync succeeded after a failed flush, but after a crash the file differs (err %v, deleted file's bytes exposed: %v)", rerr, leak)
		})
	}
}

// TestDeviceFaultOtherFilesKeepWorking: while every I/O to one file's
// blocks fails, that file's calls fail with EIO and another file's calls
// (reads, writes, fsync, namespace changes) work; after healing the volume
// is consistent and survives a crash.
func TestDeviceFaultOtherFilesKeepWorking(t *testing.T) {
	e := newEnv(t, envConfig{})
	_, devA := e.writeDurable("/a", 64<<10, 1)
	dataB, _ := e.writeDurable("/b", 64<<10, 2)
	a := e.open("/a", sluice.O_RDWR|sluice.O_DIRECT)
	defer a.Close()
	ab := e.open("/a", sluice.O_RDWR)
	defer ab.Close()
	b := e.open("/b", sluice.O_RDWR)
	defer b.Close()
	i := e.dev.Inject(faultdev.OnRange(faultdev.Reads|faultdev.Writes, devA, 64<<10))
	buf := pattern(8192, 0)
	if _, err := a.ReadAt(buf, 0); !isEIO(err) {
		t.Errorf("direct read of the failing file: %v, want EIO", err)
	}
	if _, err := a.WriteAt(buf, 8192); !isEIO(err) {
		t.Errorf("direct write of the failing file: %v, want EIO", err)
	}
	if _, err := ab.WriteAt(buf, 16384); err != nil {
		t.Errorf("buffered write of the failing file: %v", err)
	}
	if err := ab.Fsync(); !isEIO(err) {
		t.Errorf("fsync of the failing file: %v, want EIO", err)
	}
	// The other file works, fully.
	nb := pattern(8192, 3)
	if _, err := b.WriteAt(nb, 4096); err != nil {
		t.Errorf("write of the other file: %v", err)
	}
	copy(dataB[4096:], nb)
	if got, err := readAll(b); err != nil || !bytes.Equal(got, dataB) {
		t.Errorf("read of the other file: %v", err)
	}
	if err := b.Fsync(); err != nil {
		t.Errorf("fsync of the other file: %v", err)
	}
	if err := e.fs.Mkdir("/d", 0o755); err != nil {
		t.Error(err)
	}
	if err := e.fs.Rename("/b", "/d/b", 0); err != nil {
		t.Error(err)
	}
	c := e.create("/d/c", sluice.O_DIRECT)
	if _, err := c.WriteAt(pattern(4096, 4), 0); err != nil {
		t.Errorf("a new file: %v", err)
	}
	c.Close()
	i.Remove()
	if err := ab.Fsync(); err != nil {
		t.Errorf("fsync of the failing file after healing: %v", err)
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, e.fs)
	e2 := e.crash(1)
	if got, err := readFile(e2.fs, "/d/b"); err != nil || !bytes.Equal(got, dataB) {
		t.Errorf("after a crash: the other file differs (err %v)", err)
	}
	checkClean(t, e2.fs)
}

// TestDeviceFaultTruncateChangesNothing: a truncate that fails with EIO
// (its writeback of the new EOF block fails) leaves the file as it was:
// same size, same bytes, including dirty cached bytes past the new EOF.
func TestDeviceFaultTruncateChangesNothing(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.writeDurable("/a", 16<<10, 1)
	f := e.open("/a", sluice.O_RDWR)
	defer f.Close()
	data := pattern(16<<10, 2)
	if _, err := f.WriteAt(data, 0); err != nil { // dirty in the cache
		t.Fatal(err)
	}
	i := e.dev.Inject(faultdev.OnOps(faultdev.Writes))
	err := f.Truncate(6000)
	i.Remove()
	if err == nil {
		t.Skip("truncate did not fail: nothing to check")
	}
	if !isEIO(err) {
		t.Errorf("truncate on a failing device: %v, want EIO", err)
	}
	if a, _ := f.Stat(); a.Size != 16<<10 {
		t.Errorf("size %d after a failed truncate, want %d", a.Size, 16<<10)
	}
	got, err := readAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("a failed truncate changed the file's bytes")
	}
}
