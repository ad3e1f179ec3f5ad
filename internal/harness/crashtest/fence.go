package crashtest

import (
	"sync"

	"github.com/sluicefs/sluice/device"
)

// flushFence passes every request to its inner device and lets a crash
// stop flushes from completing: a flush holds the read side of mu from its
// Submit until its completion has run, and a crash takes the write side
// while it copies the device and the metadata. Without it, a flush could
// complete between the two copies, and a sync point could then persist (in
// the metadata copy) conversions of data that the device copy lost: a pair
// no real crash can produce.
type flushFence struct {
	device.Device
	mu sync.RWMutex
	// lie makes every flush succeed without flushing: a broken device,
	// for the harness's own tests.
	lie bool
}

func (f *flushFence) Submit(r *device.Request) error {
	if r.Op != device.OpFlush {
		return f.Device.Submit(r)
	}
	if f.lie {
		go r.Done(r, nil)
		return nil
	}
	f.mu.RLock()
	done := r.Done
	r.Done = func(r *device.Request, err error) {
		r.Done = done
		f.mu.RUnlock()
		if done != nil {
			done(r, err)
		}
	}
	if err := f.Device.Submit(r); err != nil {
		r.Done = done
		f.mu.RUnlock()
		return err
	}
	return nil
}

// hold stops flushes: it returns once none is in flight, and new ones wait
// in Submit until release.
func (f *flushFence) hold()    { f.mu.Lock() }
func (f *flushFence) release() { f.mu.Unlock() }
