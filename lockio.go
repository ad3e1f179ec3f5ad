package sluice

import (
	"syscall"

	"github.com/sluicefs/sluice/iolock"
)

// The I/O lock as every path takes it: lockIO (or only a free lock, under
// NOWAIT), drain (wait for in-flight direct I/O), and nowaitEAGAIN, the one
// way a NOWAIT request gives up. The lock modes each operation takes are
// tabled in the iolock package doc.

// lockIO takes the I/O lock in mode m, or with nowait only if it is free
// now (xfs_ilock_iocb); otherwise it returns the NOWAIT EAGAIN.
func (in *inode) lockIO(m iolock.Mode, nowait bool) error {
	if nowait {
		if in.io.TryLock(m) {
			return nil
		}
		return in.fs.nowaitEAGAIN(nwLockBusy)
	}
	in.io.Lock(m)
	return nil
}

// nowaitReason says why a NOWAIT request gave up: the step that would have
// blocked.
type nowaitReason uint8

const (
	nwLockBusy      nowaitReason = iota // the I/O lock is not free now
	nwNeedExclusive                     // the write needs the lock exclusive (gap past EOF, privileges to strip)
	nwSubBlockExcl                      // a sub-block direct write needs the exclusive route
	nwDrain                             // direct I/O in flight would have to be drained
	nwCachedPages                       // cached or dirty pages in the range would have to be written back or dropped
	nwAllocate                          // blocks would have to be allocated
	nwSync                              // the write would have to be written through and synced (O_DSYNC)
	nwPageBusy                          // a page is locked or under I/O
	nwPageRead                          // a page would have to be read from the device first
	nwCacheFull                         // the page cache has no room without waiting
	nwRangeBusy                         // a block range the write needs is held or queued for
)

// nowaitEAGAIN is the one way a NOWAIT request gives up (RWF_NOWAIT, or the
// ring's inline attempt): it counts the decision and its reason and
// returns syscall.EAGAIN, which callers return unwrapped, before any side
// effect (a buffered read or write that already copied bytes returns the
// short count instead). Every EAGAIN the engine returns comes from here;
// the overwrite-only attempt's own fallback is errNeedExclusive, which
// never leaves the engine.
func (fs *FS) nowaitEAGAIN(why nowaitReason) error {
	c := &fs.counters
	c.NoWaitEAGAIN.Add(1)
	switch why {
	case nwLockBusy:
		c.NoWaitLockBusy.Add(1)
	case nwNeedExclusive, nwSubBlockExcl:
		c.NoWaitNeedExclusive.Add(1)
	case nwDrain:
		c.NoWaitDrain.Add(1)
	case nwCachedPages:
		c.NoWaitCachedPages.Add(1)
	case nwAllocate:
		c.NoWaitAllocate.Add(1)
	case nwSync:
		c.NoWaitSync.Add(1)
	case nwPageBusy, nwPageRead, nwCacheFull:
		c.NoWaitPageCache.Add(1)
	case nwRangeBusy:
		c.NoWaitRangeBusy.Add(1)
	}
	return syscall.EAGAIN
}

// drain waits for every direct I/O in flight (inode_dio_wait).
//
// Preconditions: in.io is held exclusive, so no new direct I/O starts.
func (in *inode) drain() {
	if in.dio.InFlight() > 0 {
		in.fs.counters.Drains.Add(1)
	}
	in.dio.Wait()
}
