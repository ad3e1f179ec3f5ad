package sluice

import (
	"syscall"

	"github.com/sluicefs/sluice/iolock"
	"github.com/sluicefs/sluice/meta"
)

// The write checks every write path runs under the I/O lock before it
// writes (xfs_file_write_checks): the size limit, an append's position,
// zeroing a gap past EOF, stripping privileges, updating the times. Used by
// the direct and buffered write paths; it calls down into zeroing and the
// I/O lock's drain.

// writeChecks is xfs_file_write_checks: it sets an append's position,
// zeroes a gap between EOF and a write that starts past it (exclusive,
// after draining, because completions in flight may still move EOF),
// strips set-user-ID, set-group-ID and capabilities, and updates the
// times. It may return holding the lock exclusive instead of mode (every
// check is redone after the upgrade); with nowait it returns EAGAIN instead.
func (in *inode) writeChecks(k *kiocb, mode iolock.Mode) (iolock.Mode, error) {
	fs := in.fs
	drained := false
	for {
		in.mu.Lock()
		size := int64(in.attr.Size)
		strip := !k.keepPrivs && in.needsPrivStripLocked()
		in.mu.Unlock()
		if k.append {
			k.off = size
			if err := clampToMaxSize(k); err != nil {
				return mode, err
			}
			if k.direct && k.off%fs.ioUnit != 0 {
				return mode, errnof(syscall.EINVAL, "O_DIRECT append at unaligned end of file %d", k.off)
			}
		}
		// A write at EOF inside a block extends the file over the bytes
		// past EOF in that block: they must be zeros on the device
		// (checkEOFTail), once per inode and mount.
		tail := k.off == size && size%fs.blockSize != 0 && !in.eofTailClean.Load()
		needExcl := k.off > size || strip || tail
		if needExcl && k.nowait {
			return mode, fs.nowaitEAGAIN(nwNeedExclusive)
		}
		if needExcl && mode == iolock.Shared {
			in.io.Unlock(iolock.Shared)
			in.io.Lock(iolock.Exclusive)
			mode = iolock.Exclusive
			fs.counters.LockUpgrades.Add(1)
			continue
		}
		if (k.off > size || tail) && !drained {
			in.drain()
			drained = true
			continue
		}
		if k.off > size {
			if err := in.zeroEOFTail(size); err != nil {
				return mode, err
			}
		} else if tail {
			if err := in.checkEOFTail(size); err != nil {
				return mode, err
			}
		}
		if strip {
			if err := in.stripPrivs(); err != nil {
				return mode, err
			}
		}
		in.touchMtime()
		return mode, nil
	}
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

// touchMtime sets mtime and ctime to now, to be persisted at the next sync
// point.
func (in *inode) touchMtime() {
	t := now()
	in.mu.Lock()
	in.attr.Mtime, in.attr.Ctime = t, t
	was := in.attrDirty
	in.attrDirty = true
	in.mu.Unlock()
	if !was {
		// attrDirty implies membership of the dirty set (persist clears
		// both under in.mu), so only the first touch takes its lock.
		in.fs.markDirty(in)
	}
}

// stripPrivs clears set-user-ID, set-group-ID and capabilities before a
// write changes the file (file_remove_privs).
//
// Preconditions: in.io is held exclusive (writeChecks upgrades for it).
func (in *inode) stripPrivs() error {
	if !in.needsPrivStrip() {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fs.transact(func(t *txn) error {
		a := &in.attr
		a.Mode &^= syscall.S_ISUID
		if a.Mode&syscall.S_IXGRP != 0 {
			a.Mode &^= syscall.S_ISGID
		}
		a.Ctime = now()
		t.kv.Delete(meta.XattrKey(in.ino, "security.capability"))
		t.putAttr(in)
		in.attrDirty = false
		in.privileged = false
		return nil
	})
}

// needsPrivStrip reports whether a write must first clear set-user-ID,
// set-group-ID (with group execute) or a security.capability attribute
// (the kernel's !IS_NOSEC case). The answer is cached until a chmod or a
// security.* xattr change.
func (in *inode) needsPrivStrip() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.needsPrivStripLocked()
}

// needsPrivStripLocked is needsPrivStrip.
//
// Preconditions: in.mu is held.
func (in *inode) needsPrivStripLocked() bool {
	if !in.privChecked {
		mode := in.attr.Mode
		in.privileged = mode&syscall.S_ISUID != 0 || mode&syscall.S_ISGID != 0 && mode&syscall.S_IXGRP != 0
		if !in.privileged {
			_, err := in.fs.kv.Get(meta.XattrKey(in.ino, "security.capability"))
			in.privileged = err == nil
		}
		in.privChecked = true
	}
	return in.privileged
}
