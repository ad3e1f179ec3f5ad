package main

// Two hosts serving one volume in etcd, as two real processes with their
// own mount points over one shared image file and one etcd cluster (the
// test's embedded one): the active mount and a standby, failover after
// kill -9 and after SIGSTOP, measured and checked byte for byte.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
)

// The lease of the failover tests, and the takeover's I/O bound: short,
// so that the tests are quick, and the TTL long enough that a loaded CI
// machine keeps its leases alive.
const (
	failoverTTL     = 2 * time.Second
	failoverIOBound = 500 * time.Millisecond
)

// mountProc is a `sluice mount` process.
type mountProc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	mnt  string

	mu     sync.Mutex
	out    bytes.Buffer // stdout and stderr, interleaved
	change chan struct{}
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, once done
}

// startMount starts `sluice mount VOLUME MNT args...` and returns at once.
func startMount(t *testing.T, bin, name, vol, mnt string, args ...string) *mountProc {
	t.Helper()
	p := &mountProc{t: t, name: name, mnt: mnt, change: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"mount", vol, mnt}, args...)...)
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			close(p.change)
			p.change = make(chan struct{})
			p.mu.Unlock()
		}
	}()
	go func() {
		err := p.cmd.Wait()
		w.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			<-p.done
		}
		unix.Unmount(mnt, unix.MNT_DETACH)
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, p.output())
		}
	})
	return p
}

func (p *mountProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitFor waits until the process's output contains s.
func (p *mountProc) waitFor(s string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		has, ch := strings.Contains(p.out.String(), s), p.change
		p.mu.Unlock()
		if has {
			return
		}
		select {
		case <-ch:
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before saying %q:\n%s", p.name, p.err, s, p.output())
		case <-deadline:
			p.t.Fatalf("%s did not say %q within %v:\n%s", p.name, s, timeout, p.output())
		}
	}
}

// wait waits for the process to exit and returns its exit status.
func (p *mountProc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s still runs after %v:\n%s", p.name, timeout, p.output())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

// fuseSuperMagic is FUSE_SUPER_MAGIC, statfs's f_type of a FUSE mount.
const fuseSuperMagic = 0x65735546

func isFUSE(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == fuseSuperMagic
}

// waitMounted waits until dir is a FUSE mount and returns when it saw it.
func waitMounted(t *testing.T, dir string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !isFUSE(dir) {
		if time.Now().After(deadline) {
			t.Fatalf("%s is not mounted after %v", dir, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Now()
}

// writeSync writes data to path (O_DIRECT when direct, with data aligned)
// and fsyncs it.
func writeSync(path string, data []byte, flag int) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|flag, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		return err
	}
	return f.Sync()
}

func randomBlocks(n int) []byte {
	b := device.AlignedBuf(n)
	rand.Read(b)
	return b
}

// needFUSE skips a test that mounts when it cannot.
func needFUSE(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("mounts volumes (-short)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount without fusermount3")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
}

// twoHosts makes a volume in etcd over a shared image and starts host A
// mounting it and host B as a standby, each on its own mount point, from
// one volume directory. It returns the volume directory, the image and
// both processes, A serving and B waiting.
func twoHosts(t *testing.T, bin, name string, extraA ...string) (vol, img string, a, b *mountProc) {
	t.Helper()
	tmp := t.TempDir()
	vol, img = filepath.Join(tmp, "vol"), filepath.Join(tmp, "shared.img")
	url := etcdURL(t, fmt.Sprintf("failover/%s/%d", name, time.Now().UnixNano()))
	if code, _, errOut := sluiceRun(t, "mkfs", vol, "--meta", url, "--data", img, "--size", "64M"); code != 0 {
		t.Fatalf("mkfs: exit %d: %s", code, errOut)
	}
	mntA, mntB := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	os.Mkdir(mntA, 0o755)
	os.Mkdir(mntB, 0o755)
	lease := []string{"--lease-ttl", failoverTTL.String(), "--lease-io-bound", failoverIOBound.String()}
	a = startMount(t, bin, "host A", vol, mntA, append(lease, extraA...)...)
	a.waitFor("mounted "+vol, 60*time.Second)
	b = startMount(t, bin, "host B", vol, mntB, append(lease, "--standby")...)
	b.waitFor("standby: volume "+vol+" is owned by pid ", 60*time.Second)
	if isFUSE(mntB) {
		t.Fatal("the standby mounted a volume another host owns")
	}
	return vol, img, a, b
}

// finish unmounts host B cleanly and checks the volume with fsck.
func finish(t *testing.T, vol string, b *mountProc) {
	t.Helper()
	if code, _, errOut := sluiceRun(t, "umount", b.mnt); code != 0 {
		t.Errorf("umount %s: exit %d: %s", b.mnt, code, errOut)
	}
	if code := b.wait(30 * time.Second); code != 0 {
		t.Errorf("host B exited %d", code)
	}
	if code, out, errOut := sluiceRun(t, "fsck", vol); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("fsck after the failover: exit %d:\n%s%s", code, out, errOut)
	}
}

// TestFailover runs two hosts of one volume: the active one is killed
// (kill -9) during an fsync-heavy workload, or frozen (SIGSTOP) for longer
// than its lease; the standby takes the volume over and serves it, with
// every fsynced byte, and fsck finds it clean. A frozen host that wakes up
// stops, and none of its late writes reaches the device.
func TestFailover(t *testing.T) {
	needFUSE(t)
	etcdCluster.Get(t)
	bin := buildSluice(t)

	t.Run("kill", func(t *testing.T) {
		port := freePort(t)
		vol, _, a, b := twoHosts(t, bin, "kill", "--metrics", port)
		checkMetrics(t, port)
		// A third mount, without --standby, is refused in one line.
		third := filepath.Join(t.TempDir(), "c")
		os.Mkdir(third, 0o755)
		out, err := exec.Command(bin, "mount", vol, third).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.Count(string(out), "\n") != 1 ||
			!strings.Contains(string(out), "is in use by pid ") || !strings.Contains(string(out), "mounted on "+a.mnt) {
			t.Errorf("a third mount: %v: %q, want exit 1 and one line naming host A", err, out)
		}

		// fsync-heavy: every file written and fsynced, buffered and
		// O_DIRECT, from two writers, until the kill cuts them off.
		var mu sync.Mutex
		synced := map[string][]byte{}
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					name := fmt.Sprintf("w%d-%03d", w, i)
					data, flag := randomBlocks(4096*(1+i%4)), 0
					if w == 1 {
						flag = syscall.O_DIRECT
					} else {
						data = data[:len(data)-100*(i%3)]
					}
					if err := writeSync(filepath.Join(a.mnt, name), data, flag); err != nil {
						return
					}
					mu.Lock()
					synced[name] = data
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Second)
		if err := a.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		wg.Wait()
		a.wait(10 * time.Second)

		mountedAt := waitMounted(t, b.mnt, 30*time.Second)
		probe := filepath.Join(b.mnt, "probe")
		var wrote time.Time
		for {
			f, err := os.OpenFile(probe, os.O_RDWR|os.O_CREATE, 0o644)
			if err == nil {
				_, err = f.Write([]byte("the standby serves"))
				if err == nil {
					wrote = time.Now()
					err = f.Sync()
				}
				f.Close()
			}
			if err == nil {
				break
			}
			if time.Since(killed) > 30*time.Second {
				t.Fatalf("host B does not serve: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		fsynced := time.Now()
		failover := wrote.Sub(killed)
		t.Logf("failover (TTL %v, I/O bound %v): kill -9 -> B mounted %v, first successful write %v, its fsync %v",
			failoverTTL, failoverIOBound, mountedAt.Sub(killed).Round(time.Millisecond), failover.Round(time.Millisecond),
			fsynced.Sub(killed).Round(time.Millisecond))
		if failover > 2*failoverTTL {
			t.Logf("failover took more than 2 x TTL (the goal)")
		}
		if failover > 4*failoverTTL {
			t.Errorf("failover took %v", failover)
		}

		mu.Lock()
		defer mu.Unlock()
		if len(synced) < 4 {
			t.Errorf("only %d files were fsynced before the kill", len(synced))
		}
		for name, want := range synced {
			got, err := os.ReadFile(filepath.Join(b.mnt, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s through host B: %d bytes, %v; want the %d bytes fsynced through host A", name, len(got), err, len(want))
			}
		}
		t.Logf("%d files fsynced through A, all read back through B", len(synced))
		finish(t, vol, b)
	})

	t.Run("stop", func(t *testing.T) {
		vol, img, a, b := twoHosts(t, bin, "stop")
		before := randomBlocks(64 << 10)
		target := filepath.Join(a.mnt, "target")
		if err := writeSync(target, before, syscall.O_DIRECT); err != nil {
			t.Fatal(err)
		}
		// Opened now, written once A is frozen: an overwrite in place,
		// and a new file.
		f, err := os.OpenFile(target, os.O_RDWR|syscall.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		late := randomBlocks(64 << 10)

		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Every thread of A stopped before the late writes start: one
		// still running would serve them while A owns the volume, and
		// its writes would rightly reach the device.
		waitStopped(t, a.cmd.Process.Pid)
		stopped := time.Now()
		lateErrs := make(chan error, 2)
		go func() {
			_, err := f.WriteAt(late, 0)
			if err == nil {
				err = f.Sync()
			}
			lateErrs <- err
		}()
		go func() { lateErrs <- writeSync(filepath.Join(a.mnt, "late"), late, 0) }()

		waitMounted(t, b.mnt, 30*time.Second)
		mine := randomBlocks(64 << 10)
		if err := writeSync(filepath.Join(b.mnt, "from-b"), mine, syscall.O_DIRECT); err != nil {
			t.Fatalf("host B: %v", err)
		}
		t.Logf("SIGSTOP of A -> B's first fsynced write: %v", time.Since(stopped).Round(time.Millisecond))

		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		woke := time.Now()
		if code := a.wait(30 * time.Second); code != 1 || !strings.Contains(a.output(), "lost the ownership of volume") {
			t.Errorf("host A after SIGCONT: exit %d, want 1 saying it lost the volume", code)
		}
		t.Logf("SIGCONT -> host A stopped: %v", time.Since(woke).Round(time.Millisecond))
		for range 2 {
			if err := <-lateErrs; err == nil {
				t.Error("a late write through host A, fsynced, succeeded")
			} else {
				t.Logf("late write through host A: %v", err)
			}
		}

		dev, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(late); off += 4096 {
			if bytes.Contains(dev, late[off:off+4096]) {
				t.Errorf("block %d of host A's late write reached the device", off/4096)
			}
		}
		if got, err := os.ReadFile(filepath.Join(b.mnt, "target")); err != nil || !bytes.Equal(got, before) {
			t.Errorf("target through host B: %v; want what host A fsynced before it froze", err)
		}
		if got, err := os.ReadFile(filepath.Join(b.mnt, "from-b")); err != nil || !bytes.Equal(got, mine) {
			t.Errorf("from-b through host B: %v", err)
		}
		if _, err := os.Stat(filepath.Join(b.mnt, "late")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host A's late file: %v, want it absent", err)
		}
		finish(t, vol, b)
	})
}

// freePort returns a free 127.0.0.1 address for --metrics.
// waitStopped waits until every thread of process pid is stopped (state
// T in /proc/pid/task/*/stat): a SIGSTOP takes effect on each thread as it
// next returns to user space, not at once.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				continue // gone
			}
			// The state follows the command name, which is in parentheses.
			if i := bytes.LastIndexByte(b, ')'); i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				running++
			}
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d threads of process %d still not stopped 10 s after SIGSTOP", running, pid)
		}
		time.Sleep(time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// checkMetrics scrapes a mount's metrics and looks for the etcd, lease
// and fence ones.
func checkMetrics(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, m := range []string{
		"sluice_etcd_request_duration_seconds_bucket{le=\"0.001\"}",
		"sluice_etcd_commits_total", "sluice_etcd_txn_conflicts_total 0", "sluice_etcd_txn_retries_total",
		"sluice_lease_keepalive_age_seconds", "sluice_lease_ttl_seconds 2", "sluice_lease_lost 0",
		"sluice_fence_requests_total{fate=\"fenced\"} 0",
	} {
		if !bytes.Contains(body, []byte(m)) {
			t.Errorf("metrics lack %q", m)
		}
	}
}
