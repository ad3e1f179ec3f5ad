package reliability

// etcd faults under a running file system (issue 18): a volume whose
// metadata is in a real three-member etcd cluster (etcdtest, started in
// this test process), opened as a mount opens it (volume.Open with the
// ownership lease, so the owner's keep-alives and the data fence run too),
// and a workload of creates, writes, fsyncs, renames and unlinks from
// several goroutines while members are stopped, killed and restarted.
// What each test proves is in doc.go ("etcd faults").

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/meta/etcdkv/etcdtest"
	"github.com/sluicefs/sluice/volume"
)

// etcdCluster is this package's cluster, started by the first test that
// needs it, with the limits volumes need (as the README tells operators
// to start theirs).
var etcdCluster = etcdtest.Lazy{Options: etcdtest.Options{
	MaxTxnOps:       etcdkv.VolumeMaxTxnOps,
	MaxRequestBytes: etcdkv.VolumeMaxRequestBytes,
}}

func TestMain(m *testing.M) {
	code := m.Run()
	etcdCluster.Close()
	os.Exit(code)
}

// etcdRequestTimeout bounds every etcd call of the volumes here
// (etcdkv.Options.RequestTimeout), as --etcd-timeout does: long enough
// for an election (ElectionMs 500 in etcdtest) on a loaded machine, so
// that a commit sent again after a leader died finds the new one.
const etcdRequestTimeout = 3 * time.Second

// quorumRequestTimeout is the request timeout of TestEtcdQuorumLost:
// shorter, so that it ends sooner.
const quorumRequestTimeout = 2 * time.Second

// callBound is the longest any one file-system call may take under any
// fault here: a commit whose outcome is unknown is resolved within a
// second RequestTimeout (etcdkv), and the rest is slack for a loaded
// machine under -race. A call that takes longer is reported as a hang.
const callBound = 2*etcdRequestTimeout + 6*time.Second

// etcdLease is the ownership lease of the volumes here: long enough that a
// leader election (ElectionMs 500 in etcdtest) does not let the data
// fence's deadline (last renewal + TTL - margin) pass on a loaded machine.
var etcdLease = volume.LeaseOptions{TTL: 2 * time.Second, IOBound: 300 * time.Millisecond}

// etcdBuffered: t.TempDir may be on a file system without O_DIRECT.
var etcdBuffered = volume.DeviceOptions{AllowBuffered: true}

var etcdPrefixSeq atomic.Int64

// etcdVol is a volume directory whose metadata is in etcdCluster under a
// prefix of its own, with its data in an image file.
type etcdVol struct {
	t     *testing.T
	c     *etcdtest.Cluster
	dir   string
	eo    volume.EtcdOptions
	lease volume.LeaseOptions
}

// newEtcdVol makes the volume and registers a cleanup that restarts every
// member the test stopped.
func newEtcdVol(t *testing.T, lease volume.LeaseOptions, requestTimeout time.Duration) *etcdVol {
	t.Helper()
	c := etcdCluster.Get(t)
	t.Cleanup(func() {
		if err := c.Restart(0, 1, 2); err != nil {
			t.Errorf("restarting the members: %v", err)
		}
		if _, err := c.WaitLeader(); err != nil {
			t.Error(err)
		}
	})
	tmp := t.TempDir()
	ev := &etcdVol{t: t, c: c, dir: filepath.Join(tmp, "vol"), lease: lease,
		eo: volume.EtcdOptions{
			URL:            c.URL(fmt.Sprintf("reliability/%s/%d", t.Name(), etcdPrefixSeq.Add(1))),
			DialTimeout:    requestTimeout,
			RequestTimeout: requestTimeout,
		}}
	err := volume.Mkfs(ev.dir, volume.MkfsOptions{Etcd: &ev.eo, Data: filepath.Join(tmp, "shared.img"), Size: 64 << 20, Device: etcdBuffered})
	if err != nil {
		t.Fatalf("mkfs: %v", err)
	}
	return ev
}

// open opens the volume as `sluice mount` does (taking the ownership) and
// starts the engine on it.
func (ev *etcdVol) open() (*volume.Volume, *sluice.FS) {
	ev.t.Helper()
	v, err := volume.Open(ev.dir, volume.OpenOptions{Device: etcdBuffered, Etcd: &ev.eo, Lease: ev.lease})
	if err != nil {
		ev.t.Fatalf("open: %v", err)
	}
	if v.Owner == nil || v.Fence == nil {
		ev.t.Fatalf("a read-write open of a volume in etcd took no ownership")
	}
	fs, err := sluice.OpenVolume(v, &sluice.Options{Device: etcdBuffered})
	if err != nil {
		v.Close()
		ev.t.Fatalf("engine: %v", err)
	}
	return v, fs
}

// close closes the engine and then the volume (releasing the ownership),
// each within callBound.
func (ev *etcdVol) close(v *volume.Volume, fs *sluice.FS) (fsErr, volErr error) {
	ev.t.Helper()
	bounded(ev.t, "closing the engine", func() { fsErr = fs.Close() })
	bounded(ev.t, "closing the volume", func() { volErr = v.Close() })
	return fsErr, volErr
}

// closeClean closes fs and v, and fails the test unless both close
// without error.
func (ev *etcdVol) closeClean(v *volume.Volume, fs *sluice.FS) {
	ev.t.Helper()
	if fsErr, volErr := ev.close(v, fs); fsErr != nil || volErr != nil {
		ev.t.Fatalf("close: %v; %v", fsErr, volErr)
	}
}

// closeVerifyReopen closes fs and v, reopens the volume and checks that
// everything w fsynced is there, closes it again and runs fsck.
func (ev *etcdVol) closeVerifyReopen(w *etcdWorkload, v *volume.Volume, fs *sluice.FS) {
	ev.t.Helper()
	ev.closeClean(v, fs)
	v, fs = ev.open()
	w.verify(fs, "reopened")
	ev.closeClean(v, fs)
	ev.fsck()
}

// fsck checks the volume read-only, as `sluice fsck` does (no engine has
// it open), and requires it clean.
func (ev *etcdVol) fsck() *sluice.CheckReport {
	ev.t.Helper()
	v, err := volume.Open(ev.dir, volume.OpenOptions{ReadOnly: true, Device: etcdBuffered, Etcd: &ev.eo})
	if err != nil {
		ev.t.Fatalf("fsck: open: %v", err)
	}
	defer v.Close()
	r, err := sluice.CheckVolume(v)
	if err != nil {
		ev.t.Fatalf("fsck: %v", err)
	}
	if !r.Clean() {
		ev.t.Fatalf("fsck: %v", r.Problems)
	}
	return r
}

// bounded runs fn and fails the test, with every goroutine's stack, if it
// has not returned within callBound.
func bounded(t *testing.T, what string, fn func()) {
	t.Helper()
	if !withTimeout(t, callBound, what, fn) {
		var b strings.Builder
		pprof.Lookup("goroutine").WriteTo(&b, 2)
		t.Fatalf("%s: a hang; every goroutine:\n%s", what, b.String())
	}
}

// ioErr reports whether err is what a call may fail with when etcd cannot
// answer: EIO (a metadata commit or read that failed, the file system shut
// down after one, the data fence) or ETIMEDOUT.
func ioErr(err error) bool { return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ETIMEDOUT) }

// etcdCall is one file-system call of the workload.
type etcdCall struct {
	worker     int
	what, path string
	start, end time.Time
	err        error
}

func (c etcdCall) String() string {
	return fmt.Sprintf("worker %d %s %s (%v, %v)", c.worker, c.what, c.path, c.end.Sub(c.start).Round(time.Millisecond), c.err)
}

// durable is a file whose contents an fsync made durable, and what
// happened to it since: a rename or an unlink that failed leaves it at
// either name, or maybe gone.
type durable struct {
	data      []byte
	name      string
	alt       string // "" or the other name it may have after a failed rename
	mayBeGone bool   // an unlink failed: it may be gone
}

func (d *durable) certain() bool { return d.alt == "" && !d.mayBeGone }

// appendLog is a file that a worker appends to, fsyncing each append:
// its first synced bytes must be there whatever happens.
type appendLog struct {
	name   string
	synced int // bytes made durable by an fsync
	data   []byte
}

// etcdWorkload runs creates (written, fsynced, closed), renames and
// unlinks in a directory per worker, and one fsync-heavy appender, on fs,
// and records every call and every file made durable.
type etcdWorkload struct {
	t       *testing.T
	fs      *sluice.FS
	workers int
	stop    chan struct{}
	wg      sync.WaitGroup

	mu struct {
		sync.Mutex
		calls []etcdCall
		files []*durable
		logs  []*appendLog
	}
}

// startEtcdWorkload makes the workers' directories and starts them.
func startEtcdWorkload(t *testing.T, fs *sluice.FS, workers int) *etcdWorkload {
	t.Helper()
	w := &etcdWorkload{t: t, fs: fs, workers: workers, stop: make(chan struct{})}
	for k := range workers {
		if err := fs.Mkdir(fmt.Sprintf("/w%d", k), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for k := range workers {
		w.wg.Add(1)
		go w.worker(k)
	}
	w.wg.Add(1)
	go w.appender(workers)
	return w
}

// finish stops the workers and waits for them, within callBound past the
// longest call.
func (w *etcdWorkload) finish() {
	w.t.Helper()
	close(w.stop)
	bounded(w.t, "stopping the workload", w.wg.Wait)
	for _, c := range w.calls() {
		if d := c.end.Sub(c.start); d > callBound {
			w.t.Errorf("%v: took longer than %v", c, callBound)
		}
	}
}

func (w *etcdWorkload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// call runs fn as call what on path and records it.
func (w *etcdWorkload) call(worker int, what, path string, fn func() error) error {
	c := etcdCall{worker: worker, what: what, path: path, start: time.Now()}
	c.err = fn()
	c.end = time.Now()
	w.mu.Lock()
	w.mu.calls = append(w.mu.calls, c)
	w.mu.Unlock()
	return c.err
}

func (w *etcdWorkload) calls() []etcdCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.mu.calls)
}

// etcdContents returns the bytes of file i of worker k: direct files are
// whole 4 KiB blocks, buffered ones any length.
func etcdContents(k, i int, direct bool) []byte {
	n := 1 + (k*7+i*13)%20000
	if direct {
		n = 4096 * (1 + (k+i)%4)
	}
	b := device.AlignedBuf(n)
	for j := range b {
		b[j] = byte(k*31 + i*17 + j*7 + j>>9)
	}
	return b
}

// worker k: create, write, fsync and close a file; every third round
// rename one of its durable files, every fourth unlink one.
func (w *etcdWorkload) worker(k int) {
	defer w.wg.Done()
	var mine []*durable
	pick := func(i int) *durable {
		var ok []*durable
		for _, d := range mine {
			if d.certain() {
				ok = append(ok, d)
			}
		}
		if len(ok) == 0 {
			return nil
		}
		return ok[i%len(ok)]
	}
	for i := 0; !w.stopped(); i++ {
		direct := i%2 == 1
		name := fmt.Sprintf("/w%d/f%d", k, i)
		data := etcdContents(k, i, direct)
		ok := w.create(k, name, data, direct)
		if !ok {
			time.Sleep(20 * time.Millisecond) // no busy loop on a shut-down file system
		}
		if ok {
			d := &durable{data: data, name: name}
			mine = append(mine, d)
			w.mu.Lock()
			w.mu.files = append(w.mu.files, d)
			w.mu.Unlock()
		}
		if i%3 == 2 {
			if d := pick(i); d != nil {
				to := fmt.Sprintf("/w%d/r%d", k, i)
				if w.call(k, "rename", d.name+" -> "+to, func() error { return w.fs.Rename(d.name, to, 0) }) == nil {
					w.mu.Lock()
					d.name = to
					w.mu.Unlock()
				} else {
					w.mu.Lock()
					d.alt = to
					w.mu.Unlock()
				}
			}
		}
		if i%4 == 3 {
			if d := pick(i / 4); d != nil {
				err := w.call(k, "unlink", d.name, func() error { return w.fs.Unlink(d.name) })
				w.mu.Lock()
				if err == nil {
					w.mu.files = slices.DeleteFunc(w.mu.files, func(x *durable) bool { return x == d })
					mine = slices.DeleteFunc(mine, func(x *durable) bool { return x == d })
				} else {
					d.mayBeGone = true
				}
				w.mu.Unlock()
			}
		}
	}
}

// create makes name with data and fsyncs it; it reports whether every
// step succeeded (the file is then durable).
func (w *etcdWorkload) create(k int, name string, data []byte, direct bool) bool {
	flag := sluice.O_RDWR | sluice.O_CREAT | sluice.O_EXCL
	if direct {
		flag |= sluice.O_DIRECT
	}
	var f *sluice.File
	err := w.call(k, "create", name, func() (err error) {
		f, err = w.fs.OpenFile(name, flag, 0o644)
		return err
	})
	if err != nil {
		return false
	}
	err = w.call(k, "write", name, func() error {
		n, err := f.WriteAt(data, 0)
		if err == nil && n != len(data) {
			err = fmt.Errorf("short write: %d of %d bytes", n, len(data))
		}
		return err
	})
	if err == nil {
		err = w.call(k, "fsync", name, f.Fsync)
	}
	if cerr := w.call(k, "close", name, f.Close); err == nil {
		err = cerr
	}
	return err == nil
}

// appender appends 4 KiB (one block, O_DIRECT) to a log file and fsyncs
// after each append; a new log after each failure.
func (w *etcdWorkload) appender(k int) {
	defer w.wg.Done()
	for n := 0; !w.stopped(); n++ {
		l := &appendLog{name: fmt.Sprintf("/log%d", n)}
		var f *sluice.File
		err := w.call(k, "create", l.name, func() (err error) {
			f, err = w.fs.OpenFile(l.name, sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL|sluice.O_DIRECT, 0o644)
			return err
		})
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		w.mu.Lock()
		w.mu.logs = append(w.mu.logs, l)
		w.mu.Unlock()
		for i := 0; err == nil && !w.stopped(); i++ {
			b := etcdContents(k+n, i, true)[:4096]
			err = w.call(k, "append", l.name, func() error {
				_, err := f.WriteAt(b, int64(len(l.data)))
				return err
			})
			if err != nil {
				break
			}
			w.mu.Lock()
			l.data = append(l.data, b...)
			w.mu.Unlock()
			if err = w.call(k, "fsync", l.name, f.Fsync); err == nil {
				w.mu.Lock()
				l.synced = len(l.data)
				w.mu.Unlock()
			}
		}
		w.call(k, "close", l.name, f.Close)
	}
}

// failures returns the calls that failed, and fails the test for every
// failure that is not EIO or ETIMEDOUT.
func (w *etcdWorkload) failures() []etcdCall {
	w.t.Helper()
	var failed []etcdCall
	for _, c := range w.calls() {
		if c.err == nil {
			continue
		}
		failed = append(failed, c)
		if !ioErr(c.err) {
			w.t.Errorf("%v: want EIO or ETIMEDOUT", c)
		}
	}
	return failed
}

// succeeded counts the calls that started after from and succeeded.
func (w *etcdWorkload) succeeded(from time.Time) (ok, all int) {
	for _, c := range w.calls() {
		if c.start.After(from) {
			all++
			if c.err == nil {
				ok++
			}
		}
	}
	return ok, all
}

// verify checks, through fs, that every durable file holds what was
// fsynced (at its name, or at either name after a failed rename, or is
// gone after a failed unlink), and every append log its synced bytes.
func (w *etcdWorkload) verify(fs *sluice.FS, when string) {
	w.t.Helper()
	w.mu.Lock()
	files, logs := slices.Clone(w.mu.files), slices.Clone(w.mu.logs)
	w.mu.Unlock()
	lost := 0
	for _, d := range files {
		names := []string{d.name}
		if d.alt != "" {
			names = append(names, d.alt)
		}
		var found []string
		for _, name := range names {
			got, err := readPath(fs, name)
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			if err != nil {
				w.t.Errorf("%s: reading %s: %v", when, name, err)
				continue
			}
			found = append(found, name)
			if !bytes.Equal(got, d.data) {
				w.t.Errorf("%s: %s holds %d bytes other than the %d fsynced", when, name, len(got), len(d.data))
			}
		}
		switch {
		case len(found) > 1:
			w.t.Errorf("%s: a file renamed once is at both %v", when, found)
		case len(found) == 0 && !d.mayBeGone:
			lost++
			if lost <= 10 {
				w.t.Errorf("%s: fsynced file %v lost", when, names)
			}
		}
	}
	for _, l := range logs {
		got, err := readPath(fs, l.name)
		if err != nil {
			w.t.Errorf("%s: reading %s: %v", when, l.name, err)
			continue
		}
		if len(got) < l.synced || !bytes.Equal(got[:l.synced], l.data[:l.synced]) {
			w.t.Errorf("%s: %s lost fsynced appends: %d bytes, %d were fsynced", when, l.name, len(got), l.synced)
		}
	}
	if lost > 10 {
		w.t.Errorf("%s: %d fsynced files lost in all", when, lost)
	}
	w.t.Logf("%s: %d fsynced files and %d append logs (%d KiB fsynced) read back", when, len(files), len(logs), sumSynced(logs)>>10)
}

func sumSynced(logs []*appendLog) (n int) {
	for _, l := range logs {
		n += l.synced
	}
	return n
}

// readPath reads the whole of path.
func readPath(fs *sluice.FS, path string) ([]byte, error) {
	a, err := fs.Stat(path)
	if err != nil {
		return nil, err
	}
	f, err := fs.OpenFile(path, sluice.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, a.Size)
	n, err := f.ReadAt(b, 0)
	if n == len(b) {
		err = nil
	}
	return b[:n], err
}

// waitLeader waits for a leader and returns when it was seen.
func waitLeader(t *testing.T, c *etcdtest.Cluster) (int, time.Time) {
	t.Helper()
	l, err := c.WaitLeader()
	if err != nil {
		t.Fatal(err)
	}
	return l, time.Now()
}

// faultWindow is a time during which a call may fail with EIO: from a
// member's stop until electionWindow after a leader is seen again.
type faultWindow struct {
	what       string
	from, till time.Time
}

// electionWindow is how long after a leader is seen again a call may
// still fail (the client moving to a live member, a read that was in
// flight on a stopped member): calls started later must succeed.
const electionWindow = 2 * time.Second

// checkWindows fails the test for every call that failed outside the
// windows, or with an error other than EIO or ETIMEDOUT, and for a file
// system that is shut down (every commit must have found its outcome),
// and requires calls after the last window, all successful.
func checkWindows(t *testing.T, w *etcdWorkload, fs *sluice.FS, windows []faultWindow) {
	t.Helper()
	failed := w.failures()
	for _, f := range failed {
		in := ""
		for _, win := range windows {
			if f.end.After(win.from) && f.start.Before(win.till) {
				in = win.what
			}
		}
		if in == "" {
			t.Errorf("%v: failed with a leader in place", f)
		} else {
			t.Logf("%v: during %s", f, in)
		}
	}
	last := windows[len(windows)-1].till
	if ok, all := w.succeeded(last); ok != all || all == 0 {
		t.Errorf("after the last fault: %d of %d calls succeeded", ok, all)
	}
	if err := fs.Mkdir("/probe", 0o755); err != nil {
		t.Errorf("a change after the faults: %v (the file system shut down?)", err)
	}
	t.Logf("%d calls, %d failed", len(w.calls()), len(failed))
}

// etcdStats describes the KV's counters.
func etcdStats(v *volume.Volume) string {
	if kv, ok := v.KV.(*etcdkv.KV); ok {
		s := kv.Stats()
		return fmt.Sprintf("commits %d, retries %d, conflicts %d, refusals %d", s.Commits, s.Retries, s.Conflicts, s.NotOwner)
	}
	return ""
}

// slowest returns the longest call.
func slowest(calls []etcdCall) (c etcdCall) {
	for _, x := range calls {
		if x.end.Sub(x.start) > c.end.Sub(c.start) {
			c = x
		}
	}
	return c
}

// TestEtcdOneMemberDown: with one member of three down (a follower
// killed, then the leader stopped: it hands over) the file system keeps
// working: no call fails but, maybe, one with EIO in the window from the
// fault until a leader has been seen for electionWindow; every commit in
// flight at a fault finds its outcome (etcdkv sends it again), so the
// file system never shuts down; the owner keeps its lease and the data
// fence fails nothing; everything fsynced reads back, through the running
// engine and after a reopen; fsck is clean.
func TestEtcdOneMemberDown(t *testing.T) {
	ev := newEtcdVol(t, etcdLease, etcdRequestTimeout)
	c := ev.c
	v, fs := ev.open()
	w := startEtcdWorkload(t, fs, 3)
	time.Sleep(time.Second)

	var windows []faultWindow
	leader, _ := waitLeader(t, c)
	follower := (leader + 1) % c.Members()
	killed := time.Now()
	c.Kill(follower)
	windows = append(windows, faultWindow{fmt.Sprintf("the kill of follower m%d", follower), killed, time.Now().Add(electionWindow)})
	time.Sleep(1500 * time.Millisecond)
	if err := c.Restart(follower); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)

	leader, _ = waitLeader(t, c)
	stopped := time.Now()
	c.Stop(leader)
	newLeader, elected := waitLeader(t, c)
	windows = append(windows, faultWindow{fmt.Sprintf("the stop of leader m%d", leader), stopped, elected.Add(electionWindow)})
	t.Logf("stopped leader m%d; m%d leads after %v", leader, newLeader, elected.Sub(stopped).Round(time.Millisecond))
	time.Sleep(2500 * time.Millisecond)
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	w.finish()

	checkWindows(t, w, fs, windows)
	if err := v.Owner.Err(); err != nil {
		t.Errorf("the owner lost its lease with one member down: %v", err)
	}
	if s := v.Fence.Stats(); s.Fenced != 0 {
		t.Errorf("the data fence failed %d requests with one member down: %+v", s.Fenced, s)
	}
	t.Logf("slowest call: %v; keep-alives %s; %s", slowest(w.calls()), keepAlives(v.Owner), etcdStats(v))
	w.verify(fs, "live")
	ev.closeVerifyReopen(w, v, fs)
}

func keepAlives(o *etcdkv.Owner) string {
	sent, failed := o.KeepAlives()
	return fmt.Sprintf("%d sent, %d failed", sent, failed)
}

// TestEtcdLeaderChanges: the leader is killed (it hands nothing over: the
// others elect a new one after the election timeout) and restarted, three
// times, RequestTimeout + 1.5s apart, during an fsync-heavy workload. Commits in flight at a kill wait
// for the next leader and apply once; no call fails outside the election
// windows, the file system never shuts down, nothing fsynced is lost, and
// fsck is clean.
func TestEtcdLeaderChanges(t *testing.T) {
	ev := newEtcdVol(t, etcdLease, etcdRequestTimeout)
	c := ev.c
	v, fs := ev.open()
	w := startEtcdWorkload(t, fs, 3)
	time.Sleep(500 * time.Millisecond)
	var windows []faultWindow
	var elections []time.Duration
	for range 3 {
		leader, _ := waitLeader(t, c)
		killed := time.Now()
		c.Kill(leader)
		_, elected := waitLeader(t, c)
		windows = append(windows, faultWindow{fmt.Sprintf("the kill of leader m%d", leader), killed, elected.Add(electionWindow)})
		elections = append(elections, elected.Sub(killed).Round(time.Millisecond))
		time.Sleep(300 * time.Millisecond)
		if err := c.Restart(leader); err != nil {
			t.Fatal(err)
		}
		// The next kill after a commit sent to this leader has been
		// sent again: a commit whose every attempt within 2 x
		// RequestTimeout went to a leader that died gets no answer.
		time.Sleep(time.Until(killed.Add(etcdRequestTimeout + 1500*time.Millisecond)))
	}
	// Calls after the last window.
	time.Sleep(time.Until(windows[len(windows)-1].till) + 500*time.Millisecond)
	w.finish()
	t.Logf("elections after each kill: %v", elections)
	checkWindows(t, w, fs, windows)
	if err := v.Owner.Err(); err != nil {
		t.Errorf("the owner lost its lease: %v", err)
	}
	t.Logf("slowest call: %v; keep-alives %s; fence %+v; %s", slowest(w.calls()), keepAlives(v.Owner), v.Fence.Stats(), etcdStats(v))
	w.verify(fs, "live")
	ev.closeVerifyReopen(w, v, fs)
}

// TestEtcdQuorumLost: two members of three stopped for three lease TTLs
// during the workload. Every call fails with EIO or ETIMEDOUT or succeeds
// (one that needs no etcd round trip), within callBound: nothing hangs,
// nothing panics. The first commit that fails shuts the file system down
// (ErrShutdown: its in-core state is ahead of etcd), so later calls fail at
// once. The lease is not lost: etcd expires leases only with a leader, and
// a new leader extends every lease by its TTL, so the owner's keep-alives,
// retried every TTL/20, renew it once a quorum is back; meanwhile the data
// fence holds and then fails data requests (EIO) past the owner's
// deadline. After the restart, the shut-down engine closes (writing
// nothing back), the volume is released and reopens at once, everything
// fsynced before the outage is there, and fsck is clean.
func TestEtcdQuorumLost(t *testing.T) {
	lease := volume.LeaseOptions{TTL: time.Second, IOBound: 300 * time.Millisecond}
	ev := newEtcdVol(t, lease, quorumRequestTimeout)
	c := ev.c
	v, fs := ev.open()
	w := startEtcdWorkload(t, fs, 3)
	time.Sleep(time.Second)

	leader, _ := waitLeader(t, c)
	var down []int
	for i := range c.Members() {
		if i != leader {
			down = append(down, i)
		}
	}
	lost := time.Now()
	c.Stop(down...)
	t.Logf("stopping m%d and m%d took %v", down[0], down[1], time.Since(lost).Round(time.Millisecond))
	time.Sleep(3 * v.Owner.TTL())
	ownerErr, fence, deadline := v.Owner.Err(), v.Fence.Stats(), v.Owner.Deadline()
	if err := c.Restart(down...); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	_, elected := waitLeader(t, c)
	var renewed time.Time
	bounded(t, "waiting for the lease's renewal", func() {
		for v.Owner.Err() == nil && !v.Owner.LastRenewal().After(restarted) {
			time.Sleep(10 * time.Millisecond)
		}
		renewed = time.Now()
	})
	probe := fs.Mkdir("/probe", 0o755)
	w.finish()

	t.Logf("quorum lost for %v; leader %v after the restart, lease renewed after %v (keep-alives %s)",
		restarted.Sub(lost).Round(time.Millisecond), elected.Sub(restarted).Round(time.Millisecond),
		renewed.Sub(restarted).Round(time.Millisecond), keepAlives(v.Owner))
	t.Logf("during the outage: owner %v; deadline %v after the quorum was lost; fence %+v",
		ownerErr, deadline.Sub(lost).Round(time.Millisecond), fence)
	if ownerErr != nil || v.Owner.Err() != nil {
		t.Errorf("the owner lost its lease to a quorum outage: %v, then %v; want it renewed", ownerErr, v.Owner.Err())
	}
	if fence.Fenced == 0 && fence.HeldNow == 0 {
		t.Logf("no data request reached the fence past the deadline")
	}
	failed := w.failures()
	var first, slowest time.Duration
	for _, f := range failed {
		if f.end.Before(lost) {
			t.Errorf("%v: failed before the quorum was lost", f)
			continue
		}
		if d := f.end.Sub(lost); first == 0 || d < first {
			first = d
		}
		slowest = max(slowest, f.end.Sub(f.start))
	}
	if len(failed) == 0 {
		t.Fatal("no call failed without a quorum")
	}
	t.Logf("%d calls, %d failed with EIO/ETIMEDOUT; the first failure %v after the quorum was lost, the slowest failing call took %v (RequestTimeout %v)",
		len(w.calls()), len(failed), first.Round(time.Millisecond), slowest.Round(time.Millisecond), quorumRequestTimeout)
	for i, f := range failed {
		if i < 5 {
			t.Logf("%v", f)
		}
	}
	if !errors.Is(probe, sluice.ErrShutdown) || !ioErr(probe) {
		t.Errorf("a change after the quorum is back: %v, want EIO wrapping ErrShutdown (a commit failed during the outage)", probe)
	}

	fsErr, volErr := ev.close(v, fs)
	t.Logf("close of the shut-down engine: %v; volume: %v", fsErr, volErr)
	if volErr != nil {
		t.Errorf("closing the volume (releasing the lease): %v", volErr)
	}
	var served time.Time
	v, fs = ev.open()
	if err := fs.Mkdir("/after", 0o755); err != nil {
		t.Fatalf("the reopened volume: %v", err)
	}
	served = time.Now()
	t.Logf("restart of the two members -> a change on the reopened volume: %v", served.Sub(restarted).Round(time.Millisecond))
	w.verify(fs, "reopened")
	ev.closeClean(v, fs)
	ev.fsck()
}
