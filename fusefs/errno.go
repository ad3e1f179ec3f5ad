package fusefs

import (
	"errors"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// toStatus converts an engine error into the errno the kernel passes to the
// caller. It is the only place where errors become errnos.
//
// The engine's errors are *os.PathError or *os.LinkError around a
// syscall.Errno. A device or metadata failure matches syscall.EIO even when
// its cause carries another errno (a device refusing a request with EINVAL,
// the host disk under a sparse image returning ENOSPC): the caller sees EIO,
// the daemon's log sees the cause. Anything that carries no errno at all is
// an engine bug or an unexpected failure, and becomes EIO too.
func (fs *FS) toStatus(op string, ino uint64, err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	if errors.Is(err, syscall.EIO) {
		fs.logIOError(op, ino, err)
		return fuse.EIO
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fuse.Status(errno)
	}
	fs.logIOError(op, ino, err)
	return fuse.EIO
}

// ioErrorLog rate-limits the logging of I/O errors to about one line a
// second: a failing device must not flood the log, but the operator needs
// the cause.
type ioErrorLog struct {
	last       atomic.Int64 // unix nanos of the last line
	suppressed atomic.Int64
}

func (fs *FS) logIOError(op string, ino uint64, err error) {
	if fs.metrics != nil {
		fs.metrics.ioErrors.Inc()
	}
	now := time.Now().UnixNano()
	last := fs.ioErrLog.last.Load()
	if now-last < int64(time.Second) || !fs.ioErrLog.last.CompareAndSwap(last, now) {
		fs.ioErrLog.suppressed.Add(1)
		return
	}
	if n := fs.ioErrLog.suppressed.Swap(0); n > 0 {
		fs.opts.Logger.Printf("sluice: %s inode %d: %v (and %d more I/O errors)", op, ino, err, n)
		return
	}
	fs.opts.Logger.Printf("sluice: %s inode %d: %v", op, ino, err)
}
