// Package memdev is an in-memory device.Device that can be crashed: it keeps
// the writes a power failure could lose apart from those it could not, and
// builds, on demand, a device holding one possible state of the media after
// a power failure at that instant. It is the test double under every crash
// test in sluice, in the spirit of pebble's vfs.NewCrashableMem.
//
// # Model
//
// A Device holds two sparse images of its bytes and a log:
//
//   - The current image is what reads return: every write is copied into it
//     when it is submitted, so a write is visible to every read submitted
//     after its Done has run (and possibly earlier; see the device contract).
//   - The pending log lists, in the order they reached the current image,
//     the writes not yet covered by a flush, each with its own copy of the
//     data. A write is "completed" once its Done is about to run.
//   - The durable image is what survives any crash. A Flush, when submitted,
//     notes every completed write in the pending log; when it completes
//     (just before its Done runs) it copies those writes into the durable
//     image in log order and drops them from the log. A write is therefore
//     durable exactly when a Flush submitted after the write completed has
//     completed, as device.Device requires, and never earlier: a write whose
//     Done has not run is not covered by a concurrent Flush, and a Flush in
//     flight at a crash has made nothing durable yet.
//
// Flushes never fail here; errors, latency and gates belong to
// device/faultdev, which wraps any device (including this one).
//
// # Crashes
//
// CrashImage and CrashImageWith return a new, independent Device whose
// contents are the durable image plus each pending write given a Fate:
//
//   - Keep: every sector of the write reached the media.
//   - Drop: none did.
//   - Tear: an arbitrary subset of its 512 B sectors did (not necessarily a
//     prefix: a drive may reorder sectors). Tearing happens only at 512 B
//     sector boundaries, whatever the I/O unit, never inside a sector.
//
// Fates are applied in log order, so where pending writes overlap a later
// kept sector covers an earlier one. CrashImage(seed) draws the fates from a
// PCG generator seeded with seed: each write is kept, dropped or torn with
// probability 1/3, and a torn write keeps each sector with probability 1/2
// (so it may end up whole or absent). The same seed and the same log give
// the same image. The new device has no pending writes (its current image
// is also its durable image); the original is untouched and keeps working.
//
// Writes that overlap while both in flight are unordered by the device
// contract; memdev orders them as wholes (a write holds the locks of all the
// chunks it touches while it copies), and the log records that order.
//
// # Cost
//
// Storage is allocated in 64 KiB chunks on first write, so a device of many
// GiB costs almost nothing until written. Each pending write holds a copy of
// its data until a Flush covers it, and the durable image holds a second
// copy of every flushed chunk: a workload that never flushes grows the log
// without bound.
//
// # Concurrency
//
// Every method is safe for concurrent use. Reads and writes copy data in
// Submit (they never wait for I/O, there is none) and hand Done to a new
// goroutine, so Done never runs inside Submit and a slow Done delays nothing
// else. Lock order, outermost first:
//
//	chunk.mu of the current image, in ascending chunk order (writes only)
//	    Device.mu (the log, the durable image and the write sequence)
//	        chunk.mu of the durable image
package memdev

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/internal/lifecycle"
)

// SectorSize is the granularity of tearing: a crash keeps or loses each
// 512 B sector of a pending write as a whole.
const SectorSize = 512

// Options configures a Device. The zero value is valid.
type Options struct {
	// IOUnit is the alignment, in bytes, of every offset and length: a
	// power of two between 512 B and device.MaxIOUnit. The default value
	// is device.DefaultIOUnit (512).
	IOUnit int
}

// EnsureDefaults fills in the defaults of unset fields and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.IOUnit == 0 {
		o.IOUnit = device.DefaultIOUnit
	}
	return o
}

// Validate reports every problem with o at once, or returns nil.
func (o *Options) Validate() error {
	var errs []error
	if !device.ValidIOUnit(o.IOUnit) {
		errs = append(errs, fmt.Errorf("memdev: IOUnit %d is not a power of two in [512, %d]", o.IOUnit, device.MaxIOUnit))
	}
	return errors.Join(errs...)
}

// String returns the options in a form fit for a test log.
func (o Options) String() string {
	return fmt.Sprintf("memdev.Options{IOUnit: %d}", o.IOUnit)
}

// Device is an in-memory, crashable device.Device. See the package
// documentation for its model.
type Device struct {
	// size and ioUnit are immutable.
	size   int64
	ioUnit int
	// cur is the current image: what reads return. Its chunks are guarded
	// by their own locks.
	cur *image
	// life counts the requests between Submit and the return of their Done,
	// and says whether the device is closed.
	life lifecycle.Tracker

	mu struct {
		sync.Mutex
		// seq numbers the writes in the order they reached cur.
		seq uint64
		// log holds the pending writes in seq order.
		log []*logEntry
		// durable is the image every crash keeps.
		durable *image
	}
}

var _ device.Device = (*Device)(nil)

// logEntry is one write in the pending log.
type logEntry struct {
	// seq, off and data are immutable once the entry is in the log.
	seq  uint64
	off  int64
	data []byte
	// completed is set just before the write's Done runs.
	completed atomic.Bool
	// durable is set when a Flush copies the entry into the durable
	// image; the entry leaves the log in the same critical section.
	// Protected by Device.mu.
	durable bool
}

// New returns a zero-filled device of size bytes. size must be a positive
// multiple of the I/O unit.
func New(size int64, opts Options) (*Device, error) {
	opts.EnsureDefaults()
	err := opts.Validate()
	if size <= 0 || (device.ValidIOUnit(opts.IOUnit) && size%int64(opts.IOUnit) != 0) {
		err = errors.Join(err, fmt.Errorf("memdev: size %d is not a positive multiple of the %d B I/O unit", size, opts.IOUnit))
	}
	if err != nil {
		return nil, err
	}
	return newDevice(size, opts.IOUnit, newImage(size), newImage(size)), nil
}

func newDevice(size int64, ioUnit int, cur, durable *image) *Device {
	d := &Device{size: size, ioUnit: ioUnit, cur: cur}
	d.mu.durable = durable
	return d
}

// Size returns the size of the device in bytes.
func (d *Device) Size() int64 { return d.size }

// IOUnit returns the device's I/O unit.
func (d *Device) IOUnit() int { return d.ioUnit }

// Submit starts r. A read or write is carried out before Submit returns;
// Done runs later on a new goroutine.
func (d *Device) Submit(r *device.Request) error {
	if err := device.Check(r, d.size, d.ioUnit); err != nil {
		return err
	}
	if !d.life.Enter() {
		return device.NewError(r, device.ErrClosed)
	}
	switch r.Op {
	case device.OpRead:
		d.cur.readAt(r.Buf, r.Off)
		go d.complete(r, nil)
	case device.OpWrite:
		e := &logEntry{off: r.Off, data: slices.Clone(r.Buf)}
		d.cur.writeAt(e.data, e.off, func() {
			d.mu.Lock()
			d.mu.seq++
			e.seq = d.mu.seq
			d.mu.log = append(d.mu.log, e)
			d.mu.Unlock()
		})
		go d.completeWrite(r, e)
	case device.OpFlush:
		d.mu.Lock()
		var covered []*logEntry
		for _, e := range d.mu.log {
			if e.completed.Load() {
				covered = append(covered, e)
			}
		}
		d.mu.Unlock()
		go d.completeFlush(r, covered)
	}
	return nil
}

func (d *Device) complete(r *device.Request, err error) {
	if r.Done != nil {
		r.Done(r, err)
	}
	d.life.Exit()
}

func (d *Device) completeWrite(r *device.Request, e *logEntry) {
	e.completed.Store(true)
	d.complete(r, nil)
}

// completeFlush makes covered durable and completes the flush r.
func (d *Device) completeFlush(r *device.Request, covered []*logEntry) {
	if len(covered) > 0 {
		d.mu.Lock()
		d.applyLocked(covered)
		d.mu.Unlock()
	}
	d.complete(r, nil)
}

// applyLocked copies the entries in es (in seq order) that are not yet
// durable into the durable image and drops them from the log.
//
// Preconditions: d.mu is held.
func (d *Device) applyLocked(es []*logEntry) {
	n := 0
	for _, e := range es {
		if e.durable {
			continue // a later Flush completed first and covered it
		}
		d.mu.durable.writeAt(e.data, e.off, nil)
		e.durable = true
		n++
	}
	if n > 0 {
		d.mu.log = slices.DeleteFunc(d.mu.log, func(e *logEntry) bool { return e.durable })
	}
}

// Close waits for every submitted request's Done to return and closes the
// device. Crash images may still be taken from a closed device.
func (d *Device) Close() error {
	if !d.life.Shut() {
		return fmt.Errorf("memdev: close: %w", device.ErrClosed)
	}
	d.life.Wait()
	return nil
}

// PendingWrite is a write not yet covered by a completed Flush: one a crash
// may keep, drop or tear.
type PendingWrite struct {
	// Seq is the write's position in the order writes reached the device
	// (from 1, in increasing order over the device's life). Crash images
	// apply pending writes in increasing Seq.
	Seq uint64
	// Off is the write's offset in bytes.
	Off int64
	// Data is a copy of the bytes written; len(Data) is a multiple of the
	// I/O unit.
	Data []byte
	// Completed reports whether the write's Done had run (or was about
	// to) when the list was taken.
	Completed bool
}

// Sectors returns the number of 512 B sectors the write covers: the length
// of Fate.Sectors for a torn write.
func (w PendingWrite) Sectors() int { return len(w.Data) / SectorSize }

// FateKind says what a crash does to one pending write.
type FateKind uint8

const (
	// Drop loses the write entirely.
	Drop FateKind = iota
	// Keep puts the whole write on the media.
	Keep
	// Tear puts some of the write's 512 B sectors on the media: those
	// marked in Fate.Sectors.
	Tear
)

// String returns "drop", "keep" or "tear".
func (k FateKind) String() string {
	switch k {
	case Drop:
		return "drop"
	case Keep:
		return "keep"
	case Tear:
		return "tear"
	}
	return fmt.Sprintf("fate(%d)", uint8(k))
}

// Fate is what a crash does to one pending write.
type Fate struct {
	Kind FateKind
	// Sectors, for Tear, has one entry per 512 B sector of the write:
	// Sectors[i] reports whether bytes [512i, 512i+512) of the write reach
	// the media. Its length must be PendingWrite.Sectors(). Ignored for
	// Keep and Drop.
	Sectors []bool
}

// String returns the fate in a form fit for a test log, e.g. "tear(1011)".
func (f Fate) String() string {
	if f.Kind != Tear {
		return f.Kind.String()
	}
	b := make([]byte, len(f.Sectors))
	for i, s := range f.Sectors {
		b[i] = '0'
		if s {
			b[i] = '1'
		}
	}
	return "tear(" + string(b) + ")"
}

// Pending returns the pending writes in Seq order: every write not covered
// by a completed Flush, including those still in flight.
func (d *Device) Pending() []PendingWrite {
	d.mu.Lock()
	log := slices.Clone(d.mu.log)
	d.mu.Unlock()
	ws := make([]PendingWrite, len(log))
	for i, e := range log {
		ws[i] = e.pendingWrite()
	}
	return ws
}

func (e *logEntry) pendingWrite() PendingWrite {
	return PendingWrite{Seq: e.seq, Off: e.off, Data: slices.Clone(e.data), Completed: e.completed.Load()}
}

// CrashImage returns a new device holding one possible state of the media
// after a power failure now, chosen by seed as the package documentation
// describes. The same seed gives the same image of the same history.
func (d *Device) CrashImage(seed uint64) *Device {
	rng := rand.New(rand.NewPCG(seed, 0x6d656d646576)) // "memdev"
	return d.crash(func(e *logEntry) Fate {
		switch FateKind(rng.IntN(3)) {
		case Keep:
			return Fate{Kind: Keep}
		case Tear:
			s := make([]bool, len(e.data)/SectorSize)
			for i := range s {
				s[i] = rng.IntN(2) == 1
			}
			return Fate{Kind: Tear, Sectors: s}
		}
		return Fate{Kind: Drop}
	})
}

// CrashImageWith returns a new device holding the durable image plus each
// pending write given the fate fate returns for it. fate is called once per
// pending write, in Seq order, on the calling goroutine; it must not call
// methods of d. CrashImageWith panics if a Tear fate has the wrong number
// of sectors.
func (d *Device) CrashImageWith(fate func(w PendingWrite) Fate) *Device {
	return d.crash(func(e *logEntry) Fate { return fate(e.pendingWrite()) })
}

func (d *Device) crash(fate func(e *logEntry) Fate) *Device {
	d.mu.Lock()
	img := d.mu.durable.clone()
	log := slices.Clone(d.mu.log)
	d.mu.Unlock()
	for _, e := range log {
		f := fate(e)
		switch f.Kind {
		case Drop:
		case Keep:
			img.writeAt(e.data, e.off, nil)
		case Tear:
			if len(f.Sectors) != len(e.data)/SectorSize {
				panic(fmt.Sprintf("memdev: torn write of %d sectors given %d sector fates", len(e.data)/SectorSize, len(f.Sectors)))
			}
			for i, keep := range f.Sectors {
				if keep {
					o := i * SectorSize
					img.writeAt(e.data[o:o+SectorSize], e.off+int64(o), nil)
				}
			}
		default:
			panic(fmt.Sprintf("memdev: unknown fate %v", f.Kind))
		}
	}
	return newDevice(d.size, d.ioUnit, img, img.clone())
}
