// Package blockprtest is a fake of the IOC_PR_* ioctls for tests of
// package blockpr and its users: Target models one shared block device's
// persistent reservations as SPC-4 defines them (registrations per host,
// one reservation, conflicts, preemption with abort), for the commands
// blockpr issues, and records every command with its result.
//
// It exists because no device on the machines sluice is tested on has
// pr_ops; it is a model, checked against the standard by reading, not
// against a device.
package blockprtest

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/sluicefs/sluice/device/blockpr"
)

// Call is one command a host issued, with its result.
type Call struct {
	Host           string
	Req            uint
	OldKey, NewKey uint64 // IOC_PR_REGISTER, PREEMPT(_ABORT)
	Key            uint64 // IOC_PR_RESERVE, RELEASE, CLEAR
	Type           blockpr.Type
	Flags          uint32
	Err            error
}

// String reads like "a: register 0x0 -> 0x11 ignore = ok".
func (c Call) String() string {
	var b strings.Builder
	b.WriteString(c.Host + ": ")
	switch c.Req {
	case blockpr.IOC_PR_REGISTER:
		fmt.Fprintf(&b, "register %#x -> %#x", c.OldKey, c.NewKey)
		if c.Flags&blockpr.FlagIgnoreKey != 0 {
			b.WriteString(" ignore")
		}
	case blockpr.IOC_PR_RESERVE:
		fmt.Fprintf(&b, "reserve %#x %s", c.Key, c.Type)
	case blockpr.IOC_PR_RELEASE:
		fmt.Fprintf(&b, "release %#x %s", c.Key, c.Type)
	case blockpr.IOC_PR_PREEMPT:
		fmt.Fprintf(&b, "preempt %#x by %#x %s", c.OldKey, c.NewKey, c.Type)
	case blockpr.IOC_PR_PREEMPT_ABORT:
		fmt.Fprintf(&b, "preempt-abort %#x by %#x %s", c.OldKey, c.NewKey, c.Type)
	case blockpr.IOC_PR_CLEAR:
		fmt.Fprintf(&b, "clear %#x", c.Key)
	default:
		fmt.Fprintf(&b, "ioctl %#x", c.Req)
	}
	if c.Err != nil {
		return b.String() + " = " + c.Err.Error()
	}
	return b.String() + " = ok"
}

// Target is one shared device. The zero value is a device with pr_ops, no
// registration and no reservation. Its methods are safe for concurrent use.
type Target struct {
	// Refuse, if set, is every command's answer: a device without pr_ops
	// (syscall.EOPNOTSUPP) or an image file (syscall.ENOTTY).
	Refuse error
	// Fail, if set, is asked first about every command: a non-nil answer
	// is the command's result, and the command changes nothing.
	Fail func(c Call) error

	mu      sync.Mutex
	regs    map[string]uint64 // host -> registered key
	holder  string            // "" when there is no reservation
	typ     blockpr.Type
	aborted map[string]int
	calls   []Call
}

// Ioctl returns the blockpr.Ioctl of host: its commands act as that host's
// (one registration per host, as one I_T nexus).
func (t *Target) Ioctl(host string) blockpr.Ioctl {
	return func(_ uintptr, req uint, arg unsafe.Pointer) error {
		c := Call{Host: host, Req: req}
		switch req {
		case blockpr.IOC_PR_REGISTER:
			r := (*blockpr.Registration)(arg)
			c.OldKey, c.NewKey, c.Flags = r.OldKey, r.NewKey, r.Flags
		case blockpr.IOC_PR_RESERVE, blockpr.IOC_PR_RELEASE:
			r := (*blockpr.Reservation)(arg)
			c.Key, c.Type, c.Flags = r.Key, r.Type, r.Flags
		case blockpr.IOC_PR_PREEMPT, blockpr.IOC_PR_PREEMPT_ABORT:
			p := (*blockpr.Preemption)(arg)
			c.OldKey, c.NewKey, c.Type, c.Flags = p.OldKey, p.NewKey, p.Type, p.Flags
		case blockpr.IOC_PR_CLEAR:
			c.Key = (*blockpr.Clearing)(arg).Key
		default:
			return syscall.ENOTTY
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		switch {
		case t.Refuse != nil:
			c.Err = t.Refuse
		default:
			if t.Fail != nil {
				c.Err = t.Fail(c)
			}
			if c.Err == nil {
				c.Err = t.applyLocked(&c)
			}
		}
		t.calls = append(t.calls, c)
		return c.Err
	}
}

const conflict = blockpr.StatusReservationConflict

// applyLocked carries c out as SPC-4's PERSISTENT RESERVE OUT would.
//
// Preconditions: t.mu is held.
func (t *Target) applyLocked(c *Call) error {
	if t.regs == nil {
		t.regs = map[string]uint64{}
		t.aborted = map[string]int{}
	}
	mine, registered := t.regs[c.Host]
	switch c.Req {
	case blockpr.IOC_PR_REGISTER:
		if c.Flags&blockpr.FlagIgnoreKey == 0 && (registered && c.OldKey != mine || !registered && c.OldKey != 0) {
			return conflict
		}
		if c.NewKey == 0 {
			delete(t.regs, c.Host)
			if t.holder == c.Host {
				t.holder = "" // unregistering the holder releases
			}
			return nil
		}
		t.regs[c.Host] = c.NewKey // the holder keeps the reservation under its new key
	case blockpr.IOC_PR_RESERVE:
		switch {
		case !registered || c.Key != mine:
			return conflict
		case t.holder == "":
			t.holder, t.typ = c.Host, c.Type
		case t.holder != c.Host || t.typ != c.Type:
			return conflict
		}
	case blockpr.IOC_PR_RELEASE:
		switch {
		case !registered || c.Key != mine:
			return conflict
		case t.holder != c.Host:
			// Not the holder: nothing to release, GOOD.
		case t.typ != c.Type:
			return syscall.EINVAL // INVALID RELEASE OF PERSISTENT RESERVATION
		default:
			t.holder = ""
		}
	case blockpr.IOC_PR_PREEMPT, blockpr.IOC_PR_PREEMPT_ABORT:
		if !registered || c.NewKey != mine {
			return conflict
		}
		if c.OldKey == 0 {
			return syscall.EINVAL
		}
		var victims []string
		for h, k := range t.regs {
			if k == c.OldKey {
				victims = append(victims, h)
			}
		}
		if len(victims) == 0 {
			return conflict
		}
		for _, h := range victims {
			if h == c.Host {
				continue
			}
			delete(t.regs, h)
			if c.Req == blockpr.IOC_PR_PREEMPT_ABORT {
				t.aborted[h]++
			}
			if t.holder == h {
				t.holder, t.typ = c.Host, c.Type
			}
		}
	case blockpr.IOC_PR_CLEAR:
		if !registered || c.Key != mine {
			return conflict
		}
		clear(t.regs)
		t.holder = ""
	}
	return nil
}

// Calls returns the commands issued so far, oldest first.
func (t *Target) Calls() []Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Call(nil), t.calls...)
}

// Log returns Calls as strings.
func (t *Target) Log() []string {
	var out []string
	for _, c := range t.Calls() {
		out = append(out, c.String())
	}
	return out
}

// Holder returns the host holding the reservation and its key ("" and 0:
// none).
func (t *Target) Holder() (host string, key uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holder, t.regs[t.holder]
}

// Registered returns host's registered key, or 0.
func (t *Target) Registered(host string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.regs[host]
}

// CanWrite reports whether the device would execute a write from host
// now: under a Write Exclusive reservation only the holder's. (The other
// types' rules are not modelled: they allow every write.)
func (t *Target) CanWrite(host string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holder == "" || t.holder == host || t.typ != blockpr.WriteExclusive
}

// Aborted returns how many times host's queued commands were aborted by a
// PREEMPT AND ABORT.
func (t *Target) Aborted(host string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.aborted[host]
}
