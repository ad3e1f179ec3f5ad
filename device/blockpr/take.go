package blockpr

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUnsupported is matched (errors.Is) by Take's error when the device
// has no persistent reservations (Unsupported), or refuses them on a
// partition: the caller uses it without them.
var ErrUnsupported = errors.New("blockpr: the device has no persistent reservations")

// Take makes key, registered for this host, the holder of a Write
// Exclusive reservation of d, preempting the earlier owners' keys prev
// (newest first) if the reservation is not free: the first half of the
// protocol in the package doc. It returns the key that held the
// reservation and was preempted (0: the reservation was free or already
// this host's). On an error that is not ErrUnsupported, this host holds no
// reservation and no registration of key.
func Take(d *Device, key uint64, prev []uint64) (preempted uint64, err error) {
	if key == 0 {
		return 0, errors.New("blockpr: take: the key must not be 0")
	}
	if err := d.Register(0, key, FlagIgnoreKey); err != nil {
		switch {
		case Unsupported(err):
			return 0, fmt.Errorf("%w (%w)", ErrUnsupported, err)
		case errors.Is(err, syscall.EPERM) && d.partition():
			return 0, fmt.Errorf("%w: Linux refuses them on a partition (%w)", ErrUnsupported, err)
		case errors.Is(err, syscall.EPERM):
			return 0, fmt.Errorf("registering reservation key %#x: %w (persistent reservations need CAP_SYS_ADMIN, or from Linux 6.5 the device open for writing)", key, err)
		}
		return 0, fmt.Errorf("registering reservation key %#x: %w", key, err)
	}
	rerr := d.Reserve(key, WriteExclusive, 0)
	if rerr == nil {
		return 0, nil
	}
	// The reservation is another key's. Preempt the earlier owners' keys,
	// newest first, until one of them held it (Reserve then finds this
	// host the holder): a newer owner may have crashed after registering
	// without reserving, and its registration goes too.
	errs := []error{fmt.Errorf("reserving first: %w", rerr)}
	tried := 0
	for _, k := range prev {
		if k == 0 || k == key {
			continue
		}
		tried++
		if err := d.Preempt(k, key, WriteExclusive, true, 0); err != nil {
			errs = append(errs, fmt.Errorf("preempting %#x: %w", k, err))
			continue
		}
		if err := d.Reserve(key, WriteExclusive, 0); err != nil {
			errs = append(errs, fmt.Errorf("reserving after preempting %#x: %w", k, err))
			continue
		}
		return k, nil
	}
	d.Register(key, 0, 0)
	if tried == 0 {
		return 0, fmt.Errorf("reserving the data device for key %#x: %w; another key holds the reservation and no earlier owner's key is recorded, so this host does not preempt it: once no other host uses the device, clear it (e.g. blkpr --command clear)", key, rerr)
	}
	return 0, fmt.Errorf("another key holds the reservation and this host could not preempt it (%w); not writing to a device it cannot fence", joined(errs))
}

// joined is errors.Join on one line.
type joined []error

func (j joined) Error() string {
	s := make([]string, len(j))
	for i, e := range j {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (j joined) Unwrap() []error { return j }

// Give releases key's Write Exclusive reservation of d and unregisters
// key: the second half of the protocol, for a clean release after the
// last request.
func Give(d *Device, key uint64) error {
	return errors.Join(d.Release(key, WriteExclusive, 0), d.Register(key, 0, 0))
}

// partition reports whether d is a partition of a block device, which
// Linux refuses reservations on (blkdev_pr_allowed).
func (d *Device) partition() bool {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.fd), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return false
	}
	_, err := os.Stat(fmt.Sprintf("/sys/dev/block/%d:%d/partition", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))))
	return err == nil
}
