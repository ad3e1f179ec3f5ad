package sluice

import (
	"bytes"
	"runtime"
	"sync"
	"testing"

	"github.com/sluicefs/sluice/device/faultdev"
)

// TestConversionsShareCommit: direct writes to one file whose conversions
// queue while a conversion commits share the next transaction (convGroup),
// and the leader, its own request done, hands that batch to the batch's
// newest request rather than committing it itself. The first of eight
// sub-block writes into unwritten blocks becomes the leader and is held at
// the inode's mutex (the test holds it); the other seven complete and
// queue; then the leader commits its own conversion and hands the seven to
// one of them, which commits them in one transaction.
func TestConversionsShareCommit(t *testing.T) {
	const n = 8
	e := policyEnv(t, Concurrent())
	f := unwrittenFile(t, e, n)
	in := f.in
	model := make([]byte, n*4096)
	e.fs.ResetCounters()
	g := e.fault.NewGate(faultdev.Writes)
	var wg sync.WaitGroup
	for i := range n {
		buf := pattern(512, byte(i+1))
		copy(model[i*4096+512:], buf)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.WriteAt(buf, int64(i)*4096+512); err != nil {
				t.Error(err)
			}
		}()
	}
	ctx := heldCtx(t)
	if err := g.WaitHeld(ctx, n); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting until %s", what)
			}
			runtime.Gosched()
		}
	}
	queued := func() int {
		k := 0
		for r := in.convs.queue.Load(); r != nil; r = r.next {
			k++
		}
		return k
	}
	in.mu.Lock()
	g.Release(1)
	waitFor("the first write leads, its batch taken", func() bool { return in.convs.leader.Load() && queued() == 0 })
	g.Open()
	waitFor("the other writes queue", func() bool { return queued() == n-1 })
	in.mu.Unlock()
	wg.Wait()
	c := e.fs.Counters()
	if c["ConvsBatched"] != n-2 || c["ConvLeaderHandoffs"] != 1 {
		t.Fatalf("ConvsBatched %d, ConvLeaderHandoffs %d: want %d and 1 (the leader's own commit, then %d in one commit by another)",
			c["ConvsBatched"], c["ConvLeaderHandoffs"], n-2, n-1)
	}
	if got := mustReadAll(t, f); !bytes.Equal(got, model) {
		t.Fatal("file differs from the model")
	}
	checkClean(t, e.fs)
}
