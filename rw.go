package sluice

import (
	"sync"
	"syscall"
)

// The entry of every read and write: File.pread and File.pwrite (and
// File.ReadAsync and File.WriteAsync, in async.go) build a kiocb, and
// inode.read and inode.write dispatch it to the direct path (dio.go), the
// buffered path (buffered.go), or for a parallel append, the append path
// (appends.go). The layer of each file is listed in the
// package doc (doc.go, Files).

func (f *File) pread(p []byte, off int64, flags RWFlags) (int, error) {
	if !f.readable() {
		return 0, syscall.EBADF
	}
	if err := verifyArea(off, len(p)); err != nil {
		return 0, err
	}
	k := f.syncKiocb(p, off, flags)
	n, err := f.in.read(k)
	putKiocb(k)
	return n, err
}

func (f *File) pwrite(p []byte, off int64, flags RWFlags) (int, error) {
	if !f.writable() {
		return 0, syscall.EBADF
	}
	if err := verifyArea(off, len(p)); err != nil {
		return 0, err
	}
	k := f.syncKiocb(p, off, flags)
	n, err := f.in.write(k)
	putKiocb(k)
	return n, err
}

// kiocbPool recycles the kiocbs of synchronous reads and writes, which
// nothing references once the call has returned (a completion wakes the
// caller as its last use of the request): a pread or pwrite allocates
// none.
var kiocbPool = sync.Pool{New: func() any { return new(kiocb) }}

func (f *File) syncKiocb(p []byte, off int64, flags RWFlags) *kiocb {
	k := kiocbPool.Get().(*kiocb)
	*k = *f.newKiocb(p, off, flags) // inlined: the literal stays on the stack
	return k
}

func putKiocb(k *kiocb) {
	*k = kiocb{} // drop the buffer and the inode
	kiocbPool.Put(k)
}

func (f *File) newKiocb(p []byte, off int64, flags RWFlags) *kiocb {
	return &kiocb{
		in:        f.in,
		buf:       p,
		off:       off,
		direct:    f.flags&O_DIRECT != 0,
		nowait:    flags&RWFNoWait != 0,
		dsync:     f.flags&(O_DSYNC|O_SYNC) != 0 || flags&(RWFDsync|RWFSync) != 0,
		sync:      f.flags&O_SYNC == O_SYNC || flags&RWFSync != 0,
		append:    f.flags&O_APPEND != 0 || flags&RWFAppend != 0,
		keepPrivs: flags&RWFKeepPrivs != 0,
		dontcache: flags&RWFDontCache != 0,
		atomic:    flags&RWFAtomic != 0,
	}
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
	if k.atomic && len(k.buf) > 0 { // an empty write is no write, whatever its flags
		if err := in.fs.atomicWriteCheck(k); err != nil {
			return 0, err
		}
	}
	if !k.append {
		if err := clampToMaxSize(k); err != nil {
			return 0, err
		}
	} else if len(k.buf) > 0 && in.fs.policy.ParallelAppends && in.fs.sums == nil && in.eofTailKnownClean() {
		// (The first append of a mount takes the exclusive route, whose
		// write checks make sure the EOF block's tail is zeros.)
		return in.appendWrite(k)
	}
	if k.direct {
		return in.directWrite(k)
	}
	return in.bufferedWrite(k)
}
