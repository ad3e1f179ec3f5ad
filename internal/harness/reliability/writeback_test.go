package reliability

import (
	"bytes"
	"context"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/faultdev"
)

// TestWritebackOfRedirtiedPage: a page written again while its writeback
// is in flight must not be written back a second time before the first
// writeback ends (Linux waits in write_cache_pages: folio_wait_writeback).
// Two writes of the same block in flight at once are unordered (the device
// contract), so the older data could land last: the newer write is lost,
// after an fsync that reported it durable. The gate makes the older write
// land last. Found by TestSoak (owned ranges, zero-range and the syncer).
func TestWritebackOfRedirtiedPage(t *testing.T) {
	e := newEnv(t, envConfig{})
	_, dev := e.writeDurable("/a", 4096, 1) // one written block
	f := e.open("/a", sluice.O_RDWR)
	defer f.Close()
	older, newer := pattern(4096, 2), pattern(4096, 3)
	if _, err := f.WriteAt(older, 0); err != nil {
		t.Fatal(err)
	}
	// Hold the first write of the block: the writeback of older.
	g := e.dev.NewGate(faultdev.Nth(1, faultdev.And(faultdev.Writes, faultdev.Range{Off: dev, Len: 4096})))
	first := make(chan error, 1)
	go func() { first <- f.Fsync() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.WaitHeld(ctx, 1); err != nil {
		t.Fatal("the writeback never reached the device")
	}
	// The page is under writeback; write it again and fsync.
	if _, err := f.WriteAt(newer, 0); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- f.Fsync() }()
	var secondErr error
	secondDone := false
	select {
	case secondErr = <-second:
		// The engine wrote the page again while the first writeback was
		// in flight (else this fsync would still wait for it).
		secondDone = true
	case <-time.After(200 * time.Millisecond):
		// It waits for the first writeback: right. Let it go.
	}
	g.Open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !secondDone {
		secondErr = <-second
	}
	if secondErr != nil {
		t.Fatal(secondErr)
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e2 := e.reopen() // cold cache: what the device holds
	got, err := readFile(e2.fs, "/a")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, newer) {
		t.Errorf("after two fsyncs the device holds the older data (older: %v)", bytes.Equal(got, older))
	}
}
