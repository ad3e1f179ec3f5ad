package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/blockpr"
	"github.com/sluicefs/sluice/device/fencedev"
	"github.com/sluicefs/sluice/meta/etcdkv"
)

// DefaultIOBound is LeaseOptions.IOBound's default.
const DefaultIOBound = 2 * time.Second

// LeaseOptions configures the ownership that a read-write Open of a volume
// whose metadata is in etcd takes (see "One host at a time" in the package
// doc). Open ignores them for a volume on the embedded Pebble store.
type LeaseOptions struct {
	// TTL is the etcd lease's time to live: after a crash, the volume
	// is free again after about TTL. etcd counts whole seconds and has a
	// minimum (etcdkv.OwnerOptions.TTL). The default value is
	// etcdkv.DefaultLeaseTTL (5s).
	TTL time.Duration
	// Margin is how long before the lease could expire this host stops
	// submitting data requests. The default value is TTL/5.
	Margin time.Duration
	// IOBound is the longest a data request is assumed to stay in flight
	// (in the kernel, the device) after its submission: a host that takes
	// the volume over from one whose lease expired waits TTL + Margin +
	// IOBound before its first data request. The default value is
	// DefaultIOBound (2s).
	IOBound time.Duration
	// Standby makes Open wait while another host owns the volume, and
	// take it when that host releases it or its lease expires. The
	// default value is false: Open fails with an *InUseError naming the
	// holder.
	Standby bool
	// Context ends a standby's wait (Open then fails with its error).
	// The default value is nil: context.Background().
	Context context.Context
	// Mount is the mount point recorded in the owner key, for the
	// messages that name the holder. The default value is "".
	Mount string
	// OnWait, if set, is called when a standby starts waiting for a
	// holder. The default value is nil.
	OnWait func(holder etcdkv.Holder)
	// ReservationIoctl is the ioctl that the data device's persistent
	// reservation commands go through (see "One host at a time" in the
	// package doc); tests set a fake (blockprtest.Target.Ioctl). The
	// default value is nil: blockpr.Sys, the kernel's.
	ReservationIoctl blockpr.Ioctl
}

// Validate reports every problem with o at once.
func (o *LeaseOptions) Validate() error {
	var errs []error
	if o.TTL < 0 {
		errs = append(errs, fmt.Errorf("lease TTL %v is negative", o.TTL))
	}
	if o.Margin < 0 || (o.TTL > 0 && o.Margin >= o.TTL) {
		errs = append(errs, fmt.Errorf("lease margin %v must be positive and shorter than the TTL %v", o.Margin, o.TTL))
	}
	if o.IOBound < 0 {
		errs = append(errs, fmt.Errorf("I/O bound %v is negative", o.IOBound))
	}
	return errors.Join(errs...)
}

// acquireOwner takes the ownership of the volume dir whose metadata is kv,
// as o says: at once, or as a standby.
func acquireOwner(dir string, kv *etcdkv.KV, o LeaseOptions) (*etcdkv.Owner, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	own, err := kv.Acquire(ctx, etcdkv.OwnerOptions{
		TTL:     o.TTL,
		Margin:  o.Margin,
		Holder:  etcdkv.Holder{Mount: o.Mount, IOBound: o.ioBound()},
		Standby: o.Standby,
		OnWait:  o.OnWait,
	})
	var held *etcdkv.HeldError
	if errors.As(err, &held) {
		return nil, holderInUse(dir, &held.Holder)
	}
	return own, err
}

// holderInUse is the *InUseError that names a volume's holder.
func holderInUse(dir string, h *etcdkv.Holder) *InUseError {
	e := &InUseError{Dir: dir, Pid: fmt.Sprint(h.Pid), Host: h.Host, Mount: h.Mount}
	if !h.Started.IsZero() {
		e.Since = h.Started.Local().Format(time.DateTime)
	}
	return e
}

// ioBound is IOBound, defaults applied.
func (o *LeaseOptions) ioBound() time.Duration {
	if o.IOBound == 0 {
		return DefaultIOBound
	}
	return o.IOBound
}

// fence wraps dev in the data fence of own: it admits requests until the
// owner's deadline, and, after a takeover from a host whose lease expired
// or was revoked, only from TTL + Margin + IOBound (the longest of this
// host's and the previous owner's) after the acquisition.
func fence(dev device.Device, own *etcdkv.Owner, o LeaseOptions) *fencedev.Device {
	var notBefore time.Time
	if wait := own.TakeoverWait(o.ioBound()); wait > 0 {
		notBefore = own.Acquired().Add(wait)
	}
	f := fencedev.New(dev, fencedev.Options{
		NotBefore:    notBefore,
		Deadline:     own.Deadline(),
		Grace:        own.Margin(),
		RequestBound: o.ioBound(),
	})
	own.Notify(func(deadline time.Time, err error) {
		if err != nil {
			f.Fence(err)
		} else {
			f.Extend(deadline)
		}
	})
	return f
}

// releaseOwner gives the volume up after its last data request: cleanly
// (the next owner need not wait) if the takeover wait has passed, so that
// no earlier owner's request can be in flight either; otherwise it only
// revokes the lease.
func (v *Volume) releaseOwner() error {
	if v.Fence != nil && time.Now().Before(v.Fence.NotBefore()) {
		return v.Owner.Revoke()
	}
	return v.Owner.Release()
}

// EtcdStatus is what `sluice stat` shows of the etcd side of a volume.
type EtcdStatus struct {
	// Endpoints are the members' statuses, in the URL's order.
	Endpoints []etcdkv.EndpointStatus `json:"endpoints"`
	// Owner is the host that owns the volume, or nil.
	Owner *etcdkv.Holder `json:"owner"`
	// Reservation says what is known here of the data device's
	// persistent reservation: this process's own (Volume.Reservation)
	// when it owns the volume; otherwise, for an image file, that there
	// is none, and for a block device, the owner's key (its lease), which
	// the owner holds if the device has pr_ops (its mount says which).
	Reservation string `json:"reservation"`
}

// EtcdStatus asks every etcd endpoint of the volume for its status and
// reads the owner key; it returns nil for a volume on Pebble.
func (v *Volume) EtcdStatus() (*EtcdStatus, error) {
	kv, ok := v.KV.(*etcdkv.KV)
	if !ok {
		return nil, nil
	}
	s := &EtcdStatus{Endpoints: kv.Health()}
	h, err := kv.OwnerOf()
	if err != nil {
		return s, err
	}
	s.Owner = h
	s.Reservation = v.reservationStatus(h)
	return s, nil
}

// reservationStatus describes the data device's reservation for
// EtcdStatus, owner being the volume's holder (nil: none).
func (v *Volume) reservationStatus(owner *etcdkv.Holder) string {
	if v.Reservation != nil {
		return v.Reservation.String()
	}
	if v.Dir != "" {
		if fi, err := os.Stat(dataPath(v.Dir)); err == nil && fi.Mode().IsRegular() {
			return "unsupported by device (an image file)"
		}
	}
	if owner == nil || owner.Lease == 0 {
		return "none (not mounted)"
	}
	return fmt.Sprintf("key %#x if the device has pr_ops (the owner's mount says whether it holds it)", uint64(owner.Lease))
}
