package volume

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/sluicefs/sluice/device/blockpr"
	"github.com/sluicefs/sluice/meta/etcdkv"
)

// Reservation is the persistent reservation (package blockpr) that an
// owned volume holds on its data device, or why it holds none. The key is
// the ownership's etcd lease ID: nonzero, never handed out twice by etcd,
// and recorded in the owner key and LastOwnerKey (etcdkv.Holder.Lease,
// and Prior for the owners before), so that the next owner knows which
// keys to preempt.
type Reservation struct {
	// Key is this ownership's reservation key. Immutable.
	Key uint64 `json:"key"`
	// Held reports whether this host holds the device's Write Exclusive
	// reservation under Key; when false, the device offers none (Reason)
	// and only the software fence guards it. Immutable.
	Held bool `json:"held"`
	// Preempted is the previous owner's key that the acquisition preempted
	// (PREEMPT AND ABORT), or 0. Immutable.
	Preempted uint64 `json:"preempted,omitempty"`
	// Reason says why Held is false. Immutable.
	Reason string `json:"reason,omitempty"`

	dev *blockpr.Device // Immutable.
	mu  struct {
		sync.Mutex
		f *os.File // the descriptor the commands go through; nil once closed
	}
}

// String reads "held, key 0x…" (", preempted 0x…") or "unsupported by
// device (why)".
func (r *Reservation) String() string {
	switch {
	case r.Held && r.Preempted != 0:
		return fmt.Sprintf("held, key %#x (preempted the previous owner's %#x)", r.Key, r.Preempted)
	case r.Held:
		return fmt.Sprintf("held, key %#x", r.Key)
	}
	return "unsupported by device (" + r.Reason + ")"
}

// reserve takes the reservation of the data device at path for own, as
// blockpr.Take does: register own's key, reserve Write Exclusive, and
// preempt the earlier owners' keys (etcdkv.Holder.Lease and Prior of the
// previous owner) if one of them holds the reservation. A device
// without reservations gives a Reservation that is not Held; any other
// failure is an error, and the caller must not use the device.
func reserve(path string, own *etcdkv.Owner, ioctl blockpr.Ioctl) (*Reservation, error) {
	r := &Reservation{Key: uint64(own.ID())}
	// The earlier owners' keys, newest first: the previous owner's, and
	// those it knew of, in case it never took the reservation over.
	var prev []uint64
	if p := own.Previous(); p != nil {
		prev = append(prev, uint64(p.Lease))
		for _, l := range p.Prior {
			prev = append(prev, uint64(l))
		}
	}
	// Open for writing: without CAP_SYS_ADMIN, Linux 6.5 and later allow
	// reservations only through a descriptor open for writing.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the data device for its reservation: %w", err)
	}
	r.dev = blockpr.New(f.Fd(), ioctl)
	r.Preempted, err = blockpr.Take(r.dev, r.Key, prev)
	switch {
	case errors.Is(err, blockpr.ErrUnsupported):
		r.Reason = err.Error()
		var op *blockpr.OpError
		if errors.As(err, &op) {
			r.Reason = op.Error()
		}
		if fi, serr := f.Stat(); serr == nil && fi.Mode().IsRegular() {
			r.Reason = "an image file: " + r.Reason
		} else if errors.Is(err, syscall.EPERM) {
			r.Reason = "a partition: " + r.Reason
		}
		f.Close()
		return r, nil
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("persistent reservation of the data device: %w", err)
	}
	r.Held = true
	r.mu.f = f
	return r, nil
}

// release gives the reservation up after the volume's last data request:
// with clean, it releases the reservation and unregisters the key
// (blockpr.Give), so that the next owner reserves without preempting;
// otherwise (the ownership was lost: another host may have preempted this
// one) it only closes the descriptor, and the next owner preempts the key.
// Only the first call does anything.
func (r *Reservation) release(clean bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.mu.f
	if f == nil {
		return nil
	}
	r.mu.f = nil
	var err error
	if clean {
		if err = blockpr.Give(r.dev, r.Key); err != nil {
			err = fmt.Errorf("releasing the data device's reservation (key %#x; the next owner preempts it): %w", r.Key, err)
		}
	}
	return errors.Join(err, f.Close())
}
