package sluice

import (
	"syscall"

	"github.com/sluicefs/sluice/iolock"
)

func (f *File) newKiocb(p []byte, off int64, flags RWFlags) *kiocb {
	return &kiocb{
		in:        f.in,
		buf:       p,
		off:       off,
		direct:    f.flags&O_DIRECT != 0,
		nowait:    flags&RWFNoWait != 0,
		dsync:     f.flags&(O_DSYNC|O_SYNC) != 0 || flags&(RWFDsync|RWFSync) != 0,
		append:    f.flags&O_APPEND != 0 || flags&RWFAppend != 0,
		keepPrivs: flags&RWFKeepPrivs != 0,
	}
}

func (f *File) pread(p []byte, off int64, flags RWFlags) (int, error) {
	if !f.readable() {
		return 0, syscall.EBADF
	}
	if err := verifyArea(off, len(p)); err != nil {
		return 0, err
	}
	return f.in.read(f.newKiocb(p, off, flags))
}

func (f *File) pwrite(p []byte, off int64, flags RWFlags) (int, error) {
	if !f.writable() {
		return 0, syscall.EBADF
	}
	if err := verifyArea(off, len(p)); err != nil {
		return 0, err
	}
	return f.in.write(f.newKiocb(p, off, flags))
}

// read dispatches a read to the direct or buffered path.
func (in *inode) read(k *kiocb) (int, error) {
	in.mu.Lock()
	mode := in.attr.Mode
	in.mu.Unlock()
	if isDir(mode) {
		return 0, syscall.EISDIR
	}
	if k.direct {
		return in.directRead(k)
	}
	return in.bufferedRead(k)
}

// write dispatches a write to the direct or buffered path.
func (in *inode) write(k *kiocb) (int, error) {
	if err := in.fs.writable(); err != nil {
		return 0, err
	}
	if !k.append {
		if err := clampToMaxSize(k); err != nil {
			return 0, err
		}
	}
	if k.direct {
		return in.directWrite(k)
	}
	return in.bufferedWrite(k)
}

// clampToMaxSize gives EFBIG for a write at or past the maximum file size
// and shortens one that would cross it (generic_write_check_limits).
func clampToMaxSize(k *kiocb) error {
	if k.off >= maxFileSize {
		return syscall.EFBIG
	}
	if int64(len(k.buf)) > maxFileSize-k.off {
		k.buf = k.buf[:maxFileSize-k.off]
	}
	return nil
}

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

// size returns the published size.
func (in *inode) size() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return int64(in.attr.Size)
}

func roundUp(x, to int64) int64   { return (x + to - 1) / to * to }
func roundDown(x, to int64) int64 { return x / to * to }
