package sluice

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestEvictRacesSyncPoint: a last reference drop of a dirty inode racing a
// sync point that persists it. The evictor enters maybeEvict and waits
// until the sync point holds the inode's mu; then it goes on until it is
// parked on a lock inside maybeEvict, and only then does the sync point go
// on to take icache.mu. With maybeEvict taking icache.mu before the inode's mu (the
// order before the fix), both wait for each other forever, and the
// watchdog fails the test with every goroutine's stack.
func TestEvictRacesSyncPoint(t *testing.T) {
	e := newEnv(t, envConfig{})
	fs := e.fs
	f, err := fs.Create("/a")
	if err != nil {
		t.Fatal(err)
	}
	ino := f.Ino()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	in, err := fs.getInode(ino)
	if err != nil {
		t.Fatal(err)
	}
	in.mu.Lock()
	in.attr.Mtime++
	in.attrDirty = true
	in.mu.Unlock()
	fs.markDirty(in)

	evicting, persisting := make(chan struct{}), make(chan struct{})
	fs.hooks.evictStart = func(p *inode) {
		if p == in {
			close(evicting)
			<-persisting
		}
	}
	fs.hooks.persistLocked = func(p *inode) {
		if p == in {
			close(persisting)
			waitParked(t, "maybeEvict")
		}
	}
	evictDone := make(chan struct{})
	go func() {
		fs.putInode(in)
		close(evictDone)
	}()
	syncDone := make(chan error, 1)
	go func() {
		<-evicting
		syncDone <- fs.SyncAll()
	}()
	watchdog := time.After(30 * time.Second)
	for syncDone != nil || evictDone != nil {
		select {
		case err := <-syncDone:
			if err != nil {
				t.Fatal(err)
			}
			syncDone = nil
		case <-evictDone:
			evictDone = nil
		case <-watchdog:
			// Not t.Fatal or panic: the test's cleanup would wait on the
			// deadlocked locks.
			buf := make([]byte, 1<<20)
			fmt.Fprintf(os.Stderr, "--- FAIL: %s: deadlock: the sync point and the last reference drop wait for each other\n%s", t.Name(), buf[:runtime.Stack(buf, true)])
			os.Exit(1)
		}
	}
	fs.icache.mu.Lock()
	_, cached := fs.icache.m[ino]
	fs.icache.mu.Unlock()
	if cached {
		t.Errorf("inode %d still cached after its last reference went and it was persisted", ino)
	}
}

// waitParked returns once some goroutine is blocked acquiring a mutex with
// fn on its stack. It polls the goroutine dump (a deterministic observable,
// not a timed wait) and gives up only after a generous bound.
func waitParked(t *testing.T, fn string) {
	buf := make([]byte, 1<<20)
	var n int
	for i := 0; i < 100_000; i++ {
		n = runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[sync.Mutex.Lock") && strings.Contains(g, "."+fn+"(") {
				return
			}
		}
		runtime.Gosched()
	}
	fmt.Fprintf(os.Stderr, "no goroutine parked on a mutex in %s:\n%s", fn, buf[:n])
	os.Exit(1) // the caller holds locks the test's cleanup needs
}
