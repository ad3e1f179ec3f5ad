// Package devicetest is a conformance suite for device.Device
// implementations and wrappers. Each one's tests call Run with a
// constructor. It drives devices through Submit and the synchronous helpers
// of package device (ReadAt, WriteAt, Flush, Wait), which are all a Device
// needs to support.
package devicetest

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice/device"
)

// Run checks the device contract on devices made by open. open must return
// a fresh, zero-filled device of at least 1 MiB with the given I/O unit.
func Run(t *testing.T, open func(t *testing.T, ioUnit int) device.Device) {
	t.Run("RoundTrip", func(t *testing.T) {
		d := open(t, 512)
		defer d.Close()
		u := d.IOUnit()
		w := device.AlignedBuf(4 * u)
		for i := range w {
			w[i] = byte(i*7 + 1)
		}
		if err := device.WriteAt(d, w, int64(u)); err != nil {
			t.Fatal(err)
		}
		r := device.AlignedBuf(6 * u)
		if err := device.ReadAt(d, r, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r[u:5*u], w) || !isZero(r[:u]) || !isZero(r[5*u:]) {
			t.Fatal("read back differs from what was written")
		}
		if err := device.Flush(d); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Validation", func(t *testing.T) {
		d := open(t, 4096)
		defer d.Close()
		if d.IOUnit() != 4096 {
			t.Fatalf("IOUnit = %d, want 4096", d.IOUnit())
		}
		buf := device.AlignedBuf(8192)
		cases := []struct {
			name string
			p    []byte
			off  int64
		}{
			{"offset", buf[:4096], 512},
			{"length", buf[:512], 0},
			{"address", buf[512 : 512+4096], 0},
			{"bounds", buf[:4096], d.Size()},
			{"negative", buf[:4096], -4096},
			{"empty", buf[:0], 0},
		}
		for _, c := range cases {
			if err := device.ReadAt(d, c.p, c.off); !errors.Is(err, syscall.EINVAL) {
				t.Errorf("%s: ReadAt err = %v, want EINVAL", c.name, err)
			}
			if err := device.WriteAt(d, c.p, c.off); !errors.Is(err, syscall.EINVAL) {
				t.Errorf("%s: WriteAt err = %v, want EINVAL", c.name, err)
			}
		}
	})
	t.Run("DoneIsAsync", func(t *testing.T) {
		d := open(t, 512)
		defer d.Close()
		var mu sync.Mutex
		done := make(chan struct{})
		mu.Lock()
		r := &device.Request{Op: device.OpWrite, Off: 0, Buf: device.AlignedBuf(512),
			Done: func(*device.Request, error) { mu.Lock(); close(done); mu.Unlock() }}
		if err := d.Submit(r); err != nil {
			t.Fatal(err)
		}
		mu.Unlock() // would deadlock above if Done ran inside Submit
		<-done
	})
	t.Run("FlushRequest", func(t *testing.T) {
		d := open(t, 512)
		defer d.Close()
		if err := device.WriteAt(d, device.AlignedBuf(512), 0); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		r := &device.Request{Op: device.OpFlush, Done: func(_ *device.Request, err error) { done <- err }}
		if err := d.Submit(r); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// Wait clears the Done it set, so a reused request cannot
		// complete into another caller's wait.
		if err := device.Wait(d, r); err != nil || r.Done != nil {
			t.Fatalf("Wait(flush) = %v, Done cleared %t", err, r.Done == nil)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		d := open(t, 512)
		defer d.Close()
		const slots, goroutines = 256, 16
		size := int64(slots * 4096)
		if d.Size() < size {
			t.Fatalf("device too small: %d", d.Size())
		}
		model := make([]byte, size)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				buf := device.AlignedBuf(4096)
				// Each goroutine owns the slots congruent to g, so the
				// model needs no lock.
				for range 200 {
					slot := int64(rng.IntN(slots/goroutines)*goroutines + g)
					if rng.IntN(2) == 0 {
						for i := range buf {
							buf[i] = byte(rng.Uint32())
						}
						if err := device.WriteAt(d, buf, slot*4096); err != nil {
							t.Error(err)
							return
						}
						copy(model[slot*4096:], buf)
					} else {
						if err := device.ReadAt(d, buf, slot*4096); err != nil {
							t.Error(err)
							return
						}
						if !bytes.Equal(buf, model[slot*4096:(slot+1)*4096]) {
							t.Errorf("slot %d: read differs from model", slot)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
	})
	t.Run("Closed", func(t *testing.T) {
		d := open(t, 512)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := device.ReadAt(d, device.AlignedBuf(512), 0); !errors.Is(err, device.ErrClosed) {
			t.Fatalf("ReadAt after Close: %v, want ErrClosed", err)
		}
		if err := device.Flush(d); !errors.Is(err, device.ErrClosed) {
			t.Fatalf("Flush after Close: %v, want ErrClosed", err)
		}
	})
}

func isZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}
