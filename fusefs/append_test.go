package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/internal/sys/uring"
)

// How the kernel (Linux 6.18, fs/fuse/file.c) sends O_APPEND writes, and
// what the daemon sees of them: see "Appends" in the package doc. These
// tests observe it at the daemon, through FS.writeHook, and in the kernel,
// through the stacks of the writing threads.

// writeRec is one WRITE request as the daemon received it.
type writeRec struct {
	off        uint64
	size       uint32
	flags      uint32 // fuse_write_in.flags: the file's open flags
	writeFlags uint32 // fuse_write_in.write_flags: FUSE_WRITE_*
}

// writeWatch counts the WRITE requests of one inode in flight in FS.Write
// (through FS.writeHook) and can hold them there until opened: how many
// writes of one file the kernel lets reach the daemon at once.
type writeWatch struct {
	node uint64 // Immutable.

	mu struct {
		sync.Mutex
		// inFlight and maxInFlight count the WRITEs of node between the
		// start of Write and the end of its engine call. Protected by mu.
		inFlight, maxInFlight int
		// held counts the WRITEs waiting at the hook. Protected by mu.
		held int
		// release, when not nil, holds arriving WRITEs until it is
		// closed. Protected by mu.
		release chan struct{}
		// changed is closed and replaced at every change of the counts.
		// Protected by mu.
		changed chan struct{}
		// writes are node's WRITEs in order of arrival. Protected by mu.
		writes []writeRec
	}
}

// watchWrites installs a writeWatch for node on fs until the test ends.
func watchWrites(t *testing.T, fs *FS, node uint64) *writeWatch {
	w := &writeWatch{node: node}
	w.mu.changed = make(chan struct{})
	noop := func() {}
	hook := func(in *fuse.WriteIn) func() {
		if in.NodeId != w.node {
			return noop
		}
		w.mu.Lock()
		w.mu.writes = append(w.mu.writes, writeRec{off: in.Offset, size: in.Size, flags: in.Flags, writeFlags: in.WriteFlags})
		w.mu.inFlight++
		w.mu.maxInFlight = max(w.mu.maxInFlight, w.mu.inFlight)
		rel := w.mu.release
		if rel != nil {
			w.mu.held++
		}
		w.changedLocked()
		w.mu.Unlock()
		if rel != nil {
			<-rel
			w.mu.Lock()
			w.mu.held--
			w.changedLocked()
			w.mu.Unlock()
		}
		return func() {
			w.mu.Lock()
			w.mu.inFlight--
			w.changedLocked()
			w.mu.Unlock()
		}
	}
	fs.writeHook.Store(&hook)
	t.Cleanup(func() {
		w.open()
		fs.writeHook.Store(nil)
	})
	return w
}

// changedLocked wakes the waiters.
//
// Preconditions: w.mu is held.
func (w *writeWatch) changedLocked() {
	close(w.mu.changed)
	w.mu.changed = make(chan struct{})
}

// hold makes WRITEs arriving from now on wait at the hook.
func (w *writeWatch) hold() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.release == nil {
		w.mu.release = make(chan struct{})
	}
}

// open lets the held WRITEs go on, and the later ones through.
func (w *writeWatch) open() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.release != nil {
		close(w.mu.release)
		w.mu.release = nil
	}
}

// waitHeld waits until at least n WRITEs are held at the hook.
func (w *writeWatch) waitHeld(ctx context.Context, n int) error {
	for {
		w.mu.Lock()
		held, ch := w.mu.held, w.mu.changed
		w.mu.Unlock()
		if held >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d WRITEs held at the daemon, waited for %d: %w", held, n, ctx.Err())
		}
	}
}

func (w *writeWatch) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.held
}

// result returns the most WRITEs in flight at once and every WRITE seen.
func (w *writeWatch) result() (maxInFlight int, writes []writeRec) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.maxInFlight, slices.Clone(w.mu.writes)
}

// kernelStack returns the kernel stack of this process's thread tid
// (/proc/self/task/TID/stack, readable by root on a kernel with
// CONFIG_STACKTRACE); ok is false where it cannot be read.
func kernelStack(tid int) (stack string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stack", tid))
	if err != nil || len(b) == 0 {
		return "", false
	}
	return string(b), true
}

// atInodeLock reports whether a kernel stack is a FUSE write asleep at its
// inode's i_rwsem taken for writing: on 6.18 inode_lock in
// fuse_cache_write_iter and in fuse_dio_lock are inlined into
// fuse_file_write_iter, and the stack of a sleeping task leaves out the
// scheduler's functions (down_write and rwsem_down_write_slowpath are
// __sched), so its innermost frame is fuse_file_write_iter itself. A
// write waiting for the daemon's answer has fuse_simple_request and
// request_wait_answer above it instead.
func atInodeLock(stack string) bool {
	first, _, _ := strings.Cut(stack, "\n")
	return strings.Contains(first, " fuse_file_write_iter+")
}

// expectSerialised checks that, with one WRITE of the file held at the
// daemon, each of the other writer threads (tids) is asleep in the kernel
// at the file's inode lock, and still only one WRITE reached the daemon:
// the kernel, not the daemon, keeps them apart. Where kernel stacks cannot
// be read it gives the others a moment to arrive instead, and says so.
func expectSerialised(t *testing.T, w *writeWatch, tids []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.waitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := kernelStack(tids[0]); !ok {
		t.Logf("kernel stacks are not readable here: giving the other writers 500ms to reach the daemon instead")
		time.Sleep(500 * time.Millisecond)
	} else {
		for {
			blocked := 0
			var atLock, last string
			for _, tid := range tids {
				s, _ := kernelStack(tid)
				if atInodeLock(s) {
					blocked++
					atLock = s
				} else {
					last = s
				}
			}
			if blocked == len(tids)-1 {
				t.Logf("the writer whose WRITE is at the daemon:\n%sa writer at the inode lock:\n%s", last, atLock)
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%d of %d other writers asleep at the inode lock (%d WRITEs at the daemon); a stack that is not:\n%s",
					blocked, len(tids)-1, w.held(), last)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if h := w.held(); h != 1 {
		t.Fatalf("%d WRITEs of the file at the daemon at once, want 1", h)
	}
}

// writers starts n goroutines, each on its own locked OS thread with its own descriptor of path opened O_WRONLY|flags, running
// do(fd, i). It returns the threads' IDs and a function that waits for the
// writers and returns their first error.
func writers(t *testing.T, path string, flags int, n int, do func(fd, i int) error) (tids []int, wait func() error) {
	t.Helper()
	tidc := make(chan int, n)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tidc <- syscall.Gettid()
			fd, err := syscall.Open(path, syscall.O_WRONLY|flags, 0)
			if err != nil {
				errc <- err
				return
			}
			defer syscall.Close(fd)
			if err := do(fd, i); err != nil {
				errc <- err
			}
		}()
	}
	for range n {
		tids = append(tids, <-tidc)
	}
	return tids, func() error {
		wg.Wait()
		close(errc)
		return <-errc
	}
}

const recordSize = 4096

// record is writer w's record number seq: a header naming both, then a
// pattern of them.
func record(w, seq int) []byte {
	b := alignedBuf(recordSize)
	copy(b, pattern(recordSize, byte(w*37+seq)))
	copy(b, fmt.Sprintf("writer %02d record %04d\n", w, seq))
	return b
}

// checkRecords checks that data is exactly the records of n writers with k
// records each, every one present once and intact, each writer's in the
// order it wrote them.
func checkRecords(t *testing.T, data []byte, n, k int) {
	t.Helper()
	if len(data) != n*k*recordSize {
		t.Fatalf("file is %d bytes, want %d records of %d", len(data), n*k, recordSize)
	}
	seen := make(map[[2]int]bool)
	next := make([]int, n)
	for off := 0; off < len(data); off += recordSize {
		r := data[off : off+recordSize]
		var w, seq int
		if _, err := fmt.Sscanf(string(r[:32]), "writer %d record %d\n", &w, &seq); err != nil || w < 0 || w >= n || seq < 0 || seq >= k {
			t.Fatalf("no record at offset %d: %q", off, r[:32])
		}
		if !bytes.Equal(r, record(w, seq)) {
			t.Fatalf("record %d of writer %d at offset %d is damaged", seq, w, off)
		}
		if seen[[2]int{w, seq}] {
			t.Fatalf("record %d of writer %d twice (again at offset %d)", seq, w, off)
		}
		seen[[2]int{w, seq}] = true
		if seq != next[w] {
			t.Fatalf("writer %d: record %d at offset %d, want its record %d next", w, seq, off, next[w])
		}
		next[w]++
	}
}

// checkAppendWrites checks that the daemon received n appends of one
// record each, one after the other, each at the end of file the kernel
// chose (the previous one's end) and with O_APPEND in
// fuse_write_in.flags, none from writeback.
func checkAppendWrites(t *testing.T, writes []writeRec, n int) {
	t.Helper()
	if len(writes) != n {
		t.Fatalf("%d WRITEs for %d appends", len(writes), n)
	}
	for i, r := range writes {
		if r.off != uint64(i*recordSize) || r.size != recordSize || r.flags&syscall.O_APPEND == 0 || r.writeFlags&fuse.WRITE_CACHE != 0 {
			t.Fatalf("WRITE %d is %+v: want offset %d (the end of file), %d bytes, O_APPEND in flags, not FUSE_WRITE_CACHE",
				i, r, i*recordSize, recordSize)
		}
	}
}

// engineContents reads node whole through the engine, not the mount.
func engineContents(t *testing.T, e *mountEnv, node uint64) []byte {
	t.Helper()
	f, err := e.eng.OpenIno(sluice.Ino(node), sluice.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, a.Size)
	if _, err := f.ReadAt(b, 0); err != nil && len(b) > 0 {
		t.Fatal(err)
	}
	return b
}

// createEmpty creates an empty file through the mount and returns its node
// ID (sluice's node IDs are the engine's inode numbers).
func createEmpty(t *testing.T, e *mountEnv, name string) uint64 {
	t.Helper()
	fd, err := syscall.Open(e.path(name), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	err = syscall.Fstat(fd, &st)
	syscall.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestConcurrentAppends: eight threads append tagged 4 KiB records with
// write(2) to one file through the mount, each on its own O_APPEND
// descriptor. Every record lands once, whole, and the size is their sum.
// Without the writeback cache the kernel sends the appends one at a time,
// each at the end of file it chose under the exclusive inode lock and with
// O_APPEND in fuse_write_in.flags: the daemon never has two WRITEs of the
// file at once, even for O_DIRECT opens answered
// FOPEN_PARALLEL_DIRECT_WRITES, and while one is held at the daemon the
// seven other threads sleep at the inode lock in the kernel. With the
// writeback cache the appends end in the page cache and the daemon sees
// only writeback: no open flags (no O_APPEND), FUSE_WRITE_CACHE.
func TestConcurrentAppends(t *testing.T) {
	const n, k = 8, 32
	for _, c := range []struct {
		name      string
		fuse      Options
		flags     int
		writeback bool
	}{
		{"direct", Options{}, syscall.O_DIRECT, false},
		{"kernel", Options{Cache: KernelCache}, 0, false},
		{"sluice", Options{Cache: SluiceCache}, 0, false},
		{"writeback", Options{Cache: KernelCache, WritebackCache: true}, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := sluice.Concurrent()
			e := newMountEnv(t, envOpts{engine: sluice.Options{Policy: &pol}, fuse: c.fuse, cacheSet: true}) // each mode its own case
			node := createEmpty(t, e, "log")
			w := watchWrites(t, e.srv.FS(), node)
			if !c.writeback {
				w.hold()
			}
			tids, wait := writers(t, e.path("log"), syscall.O_APPEND|c.flags, n, func(fd, i int) error {
				for seq := range k {
					if m, err := syscall.Write(fd, record(i, seq)); err != nil || m != recordSize {
						return fmt.Errorf("writer %d record %d: wrote %d: %v", i, seq, m, err)
					}
				}
				return nil
			})
			if !c.writeback {
				expectSerialised(t, w, tids)
				w.open()
			}
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(e.path("log"), &st); err != nil || st.Size != n*k*recordSize {
				t.Fatalf("size through the mount %d (%v), want %d", st.Size, err, n*k*recordSize)
			}
			checkRecords(t, engineContents(t, e, node), n, k)
			got, err := os.ReadFile(e.path("log"))
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, got, n, k)

			maxInFlight, writes := w.result()
			if c.writeback {
				for _, r := range writes {
					if r.flags != 0 || r.writeFlags&fuse.WRITE_CACHE == 0 {
						t.Fatalf("writeback WRITE %+v: want no open flags (no O_APPEND) and FUSE_WRITE_CACHE", r)
					}
				}
				t.Logf("writeback: %d WRITEs, at most %d in flight at once", len(writes), maxInFlight)
				e.checkClean()
				return
			}
			if maxInFlight != 1 {
				t.Errorf("at most %d WRITEs of the file in flight at the daemon, want 1", maxInFlight)
			}
			checkAppendWrites(t, writes, n*k)
			e.checkClean()
		})
	}
}

// TestDirectWriteConcurrencyAtDaemon is the contrast: two threads each
// write 4 KiB O_DIRECT to one file, with the first WRITE to arrive held at
// the daemon. Overwrites inside the file, on opens answered
// FOPEN_PARALLEL_DIRECT_WRITES, are both at the daemon at once
// (fuse_dio_lock takes the inode lock shared); writes past the end of
// file, appends, and any write under the classic policy (no
// FOPEN_PARALLEL_DIRECT_WRITES) leave the second thread asleep at the
// inode lock in the kernel (fuse_dio_wr_exclusive_lock).
func TestDirectWriteConcurrencyAtDaemon(t *testing.T) {
	const size = 64 << 10
	for _, c := range []struct {
		name     string
		policy   sluice.Policy
		flags    int
		at       func(i int) int64 // pwrite offset of writer i; -1: write(2) O_APPEND
		parallel bool
	}{
		{"overwrite", sluice.Concurrent(), 0, func(i int) int64 { return int64(i) * 16384 }, true},
		{"overwrite-classic", sluice.Classic(), 0, func(i int) int64 { return int64(i) * 16384 }, false},
		{"past-eof", sluice.Concurrent(), 0, func(i int) int64 { return size + int64(i)*16384 }, false},
		{"append", sluice.Concurrent(), syscall.O_APPEND, func(int) int64 { return -1 }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{engine: sluice.Options{Policy: &c.policy}})
			writeDirectFile(t, e, "f", size)
			var st syscall.Stat_t
			if err := syscall.Stat(e.path("f"), &st); err != nil {
				t.Fatal(err)
			}
			w := watchWrites(t, e.srv.FS(), st.Ino)
			w.hold()
			tids, wait := writers(t, e.path("f"), syscall.O_DIRECT|c.flags, 2, func(fd, i int) error {
				b := record(i, 0)
				var m int
				var err error
				if off := c.at(i); off < 0 {
					m, err = syscall.Write(fd, b)
				} else {
					m, err = syscall.Pwrite(fd, b, off)
				}
				if err != nil || m != len(b) {
					return fmt.Errorf("writer %d: wrote %d: %v", i, m, err)
				}
				return nil
			})
			if c.parallel {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := w.waitHeld(ctx, 2); err != nil {
					t.Fatalf("overwrites on a FOPEN_PARALLEL_DIRECT_WRITES open: %v", err)
				}
			} else {
				expectSerialised(t, w, tids)
			}
			w.open()
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			if maxInFlight, _ := w.result(); (maxInFlight == 2) != c.parallel {
				t.Errorf("at most %d WRITEs in flight at the daemon; parallel %v", maxInFlight, c.parallel)
			}
			e.checkClean()
		})
	}
}

// TestAppendOpenWritesAtKernelOffset: a WRITE through a handle opened
// O_APPEND lands at the offset the kernel sent, never at the engine's end
// of file: O_APPEND does not reach the engine (planOpen). The kernel
// already chose the offset of an append from its i_size, and writeback
// and mmap write dirty pages through any writable handle of the inode,
// O_APPEND or not, at the pages' offsets.
func TestAppendOpenWritesAtKernelOffset(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags uint32
		o     Options
	}{
		{"buffered", syscall.O_WRONLY | syscall.O_APPEND, Options{}},
		{"direct", syscall.O_WRONLY | syscall.O_APPEND | syscall.O_DIRECT, Options{}},
		{"writeback", syscall.O_WRONLY | syscall.O_APPEND, Options{WritebackCache: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newRawEnv(t, sluice.Options{}, c.o)
			id, fh := e.create("f", syscall.O_RDWR, 0o644)
			base := pattern(8192, 1)
			e.write(id, fh, base, 0)
			afh := e.open(id, c.flags)
			over := pattern(4096, 2)
			e.write(id, afh, over, 0)
			tail := pattern(4096, 3)
			e.write(id, afh, tail, 8192)
			want := slices.Concat(over, base[4096:], tail)
			if got := e.contents(id); !bytes.Equal(got, want) {
				t.Fatalf("after WRITEs at 0 and 8192 through an O_APPEND handle: %d bytes, want %d (the WRITE at 0 landed elsewhere?)", len(got), len(want))
			}
		})
	}
}

// tasksIn returns the kernel stacks of this process's threads whose
// stack has fn in it, by thread name (comm: iou-wrk-N for io_uring's
// workers).
func tasksIn(fn string) map[int]string {
	found := make(map[int]string)
	ents, _ := os.ReadDir("/proc/self/task")
	for _, d := range ents {
		var tid int
		if _, err := fmt.Sscan(d.Name(), &tid); err != nil {
			continue
		}
		if s, ok := kernelStack(tid); ok && strings.Contains(s, fn) {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/comm", tid))
			found[tid] = strings.TrimSpace(string(comm)) + ":\n" + s
		}
	}
	return found
}

// TestURingWritesThroughMount: four writes to one file submitted through
// an io_uring in one io_uring_enter, with the WRITEs held at the daemon.
// FUSE files have no FMODE_NOWAIT but are pollable, and with POLL
// answered ENOSYS fuse_file_poll says writable, so io_uring
// (io_file_supports_nowait) issues O_DIRECT writes inline on the
// submitting thread with IOCB_NOWAIT, which FUSE does not honour: an
// append (extending: fuse_direct_IO waits for it) holds io_uring_enter
// until the daemon answers, so the ring's appends reach the daemon one at
// a time; overwrites return -EIOCBQUEUED (CAP_ASYNC_DIO) and all four are
// at the daemon at once. Buffered writes are punted to io-wq, hashed on
// the inode (FUSE sets no FOP_DIO_PARALLEL_WRITE), and the inode lock
// serialises them anyway: one at a time.
func TestURingWritesThroughMount(t *testing.T) {
	const n = 4
	for _, c := range []struct {
		name     string
		flags    int
		prefill  int
		parallel bool
	}{
		{"append-direct", syscall.O_APPEND | syscall.O_DIRECT, 0, false},
		{"append-buffered", syscall.O_APPEND, 0, false},
		{"overwrite-direct", syscall.O_DIRECT, 64 << 10, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := uring.New(8, &uring.Params{})
			if err != nil {
				t.Skipf("no io_uring here: %v", err)
			}
			r.Close()
			pol := sluice.Concurrent()
			// Write-through: the kernel's inode lock and the daemon's WRITEs.
			e := newMountEnv(t, envOpts{engine: sluice.Options{Policy: &pol}, cacheSet: true})
			var node uint64
			if c.prefill > 0 {
				writeDirectFile(t, e, "f", c.prefill)
				var st syscall.Stat_t
				if err := syscall.Stat(e.path("f"), &st); err != nil {
					t.Fatal(err)
				}
				node = st.Ino
			} else {
				node = createEmpty(t, e, "f")
			}
			w := watchWrites(t, e.srv.FS(), node)
			w.hold()
			bufs := make([][]byte, n)
			for i := range bufs {
				bufs[i] = record(i, 0)
			}
			tidc := make(chan int, 1)
			done := make(chan error, 1)
			go func() {
				// One locked thread submits and reaps: completions of
				// queued requests run as task work of the submitter.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				tidc <- syscall.Gettid()
				done <- func() error {
					r, err := uring.New(8, &uring.Params{})
					if err != nil {
						return err
					}
					defer r.Close()
					fd, err := syscall.Open(e.path("f"), syscall.O_WRONLY|c.flags, 0)
					if err != nil {
						return err
					}
					defer syscall.Close(fd)
					for i := range n {
						s := r.GetSQE()
						s.PrepWrite(fd, bufs[i], uint64(i)*recordSize) // the offset is ignored for O_APPEND
						s.UserData = uint64(i)
					}
					if _, err := r.Submit(); err != nil {
						return err
					}
					for range n {
						cqe, err := r.WaitCQE()
						if err != nil {
							return err
						}
						if cqe.Res != recordSize {
							return fmt.Errorf("write %d: %d (%v)", cqe.UserData, cqe.Res, cqe.Err())
						}
						r.CQAdvance(1)
					}
					return nil
				}()
			}()
			sub := <-tidc
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if c.parallel {
				if err := w.waitHeld(ctx, n); err != nil {
					t.Fatalf("O_DIRECT overwrites through io_uring: %v", err)
				}
			} else {
				if err := w.waitHeld(ctx, 1); err != nil {
					t.Fatal(err)
				}
				// Where is the WRITE at the daemon issued from? Inline
				// (the submitter's io_uring_enter, which issues SQEs in
				// order) or an io-wq worker (iou-wrk).
				if _, ok := kernelStack(sub); ok {
					for {
						in := tasksIn("fuse_file_write_iter")
						s, _ := kernelStack(sub)
						inline := strings.Contains(s, "io_submit_sqes") && strings.Contains(s, "fuse_file_write_iter")
						if inline || (strings.Contains(s, "io_cqring_wait") && len(in) == 1) {
							for _, st := range in {
								t.Logf("the write at the daemon (inline %v) is issued by %s", inline, st)
							}
							break
						}
						if ctx.Err() != nil {
							t.Fatalf("submitter:\n%s\nthreads in fuse_file_write_iter: %v", s, in)
						}
						time.Sleep(time.Millisecond)
					}
				} else {
					time.Sleep(500 * time.Millisecond)
				}
				if h := w.held(); h != 1 {
					t.Fatalf("%d appends through io_uring at the daemon at once, want 1", h)
				}
			}
			w.open()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			maxInFlight, writes := w.result()
			if (maxInFlight == n) != c.parallel || (!c.parallel && maxInFlight != 1) {
				t.Errorf("at most %d WRITEs in flight at the daemon; parallel %v", maxInFlight, c.parallel)
			}
			if !c.parallel {
				checkAppendWrites(t, writes, n)
				checkRecords(t, engineContents(t, e, node), n, 1)
			}
			e.checkClean()
		})
	}
}
