package sluice

import (
	"errors"
	"sync"
	"syscall"
)

// The asynchronous entry points the ring package builds on: the kernel's
// "issue with IOCB_NOWAIT, and punt what would block" model. Each call
// tries the operation inline without blocking and says how it ended:
//
//	n, nil / n, err   completed inline
//	ErrQueued         device I/O was submitted; done(n, err) runs later,
//	                  on a device completion goroutine
//	ErrRetryArmed     (async buffered reads only) the read met a page under
//	                  I/O and armed retry on its unlock; retry runs once,
//	                  on the unlocking goroutine, and the caller re-issues
//	                  the read then; done is not called
//	EAGAIN            it would block: re-issue it with the blocking calls
//	                  (Pread, Pwrite, ...) from a worker, or, for a caller
//	                  that asked for RWFNoWait itself, fail it
var (
	// ErrQueued says the operation was submitted and done will be called.
	ErrQueued = errQueued
	// ErrRetryArmed says retry was armed on a page's unlock.
	ErrRetryArmed = errors.New("sluice: read waits for a page; retry armed")
)

// ReadAsync tries a read inline without blocking (see ErrQueued). retry is
// armed on a locked page only when the policy has AsyncBufferedReads and
// the file is not O_DIRECT; pass nil to get EAGAIN instead.
func (f *File) ReadAsync(p []byte, off int64, flags RWFlags, retry func(), done func(n int, err error)) (int, error) {
	if err := f.begin(); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	if err := verifyArea(off, len(p)); err != nil || !f.readable() {
		f.end()
		if err == nil {
			err = syscall.EBADF
		}
		return 0, pathErr("read", f.name, err)
	}
	a := f.newAsyncKiocb(p, off, flags, "read", done)
	if retry != nil && !a.k.direct && f.fs.policy.AsyncBufferedReads {
		a.k.asyncRetry = retry
	}
	n, err := f.in.read(&a.k)
	if err != errQueued {
		a.free()
	}
	return f.asyncResult("read", n, err)
}

// WriteAsync tries a write inline without blocking (see ErrQueued).
func (f *File) WriteAsync(p []byte, off int64, flags RWFlags, done func(n int, err error)) (int, error) {
	if err := f.begin(); err != nil {
		return 0, pathErr("write", f.name, err)
	}
	if err := verifyArea(off, len(p)); err != nil || !f.writable() {
		f.end()
		if err == nil {
			err = syscall.EBADF
		}
		return 0, pathErr("write", f.name, err)
	}
	a := f.newAsyncKiocb(p, off, flags, "write", done)
	n, err := f.in.write(&a.k)
	if err != errQueued {
		a.free()
	}
	return f.asyncResult("write", n, err)
}

// asyncKiocb is the kiocb of a ReadAsync or WriteAsync call, with what its
// completion needs. It is pooled, with its completion bound once, so that
// an asynchronous read or write allocates neither a kiocb nor a closure.
// It lives until the engine's call returns, or, if the engine queued the
// request (errQueued), until the request's done has run: no path keeps a
// kiocb past either (a completion calls done last, and a retry a buffered
// read arms on a page is the caller's function, not the kiocb's).
type asyncKiocb struct {
	k    kiocb
	f    *File
	op   string                 // "read" or "write", for the error
	done func(n int, err error) // the caller's
	fn   func(n int, err error) // complete, bound once
}

var asyncKiocbPool = sync.Pool{New: func() any { return new(asyncKiocb) }}

func (f *File) newAsyncKiocb(p []byte, off int64, flags RWFlags, op string, done func(n int, err error)) *asyncKiocb {
	a := asyncKiocbPool.Get().(*asyncKiocb)
	if a.fn == nil {
		a.fn = a.complete
	}
	a.k = *f.newKiocb(p, off, flags|RWFNoWait) // inlined: the literal stays on the stack
	a.k.done = a.fn
	a.f, a.op, a.done = f, op, done
	return a
}

// free returns a to the pool, dropping what it referenced.
func (a *asyncKiocb) free() {
	*a = asyncKiocb{fn: a.fn}
	asyncKiocbPool.Put(a)
}

// complete is a queued request's done: it frees a, ends the call's hold on
// the file and calls the caller's done.
func (a *asyncKiocb) complete(n int, err error) {
	f, op, done := a.f, a.op, a.done
	a.free()
	f.end()
	done(n, pathErr(op, f.name, err))
}

// asyncResult ends the call's hold on the file unless the operation was
// queued (then done ends it), and wraps the error.
func (f *File) asyncResult(op string, n int, err error) (int, error) {
	switch err {
	case errQueued:
		return 0, ErrQueued
	case ErrRetryArmed:
		f.end()
		return 0, ErrRetryArmed
	}
	f.end()
	return n, pathErr(op, f.name, err)
}

// ParallelDirectWrites reports whether the file takes direct writes in
// parallel, so that an async submission layer need not serialise its
// writes (seed 002: FMODE_DIO_PARALLEL_WRITE, FOPEN_PARALLEL_DIRECT_WRITES):
// it is open O_DIRECT and the policy has ParallelDirectWrites. The
// engine's I/O lock keeps direct writes correct either way.
func (f *File) ParallelDirectWrites() bool {
	return f.flags&O_DIRECT != 0 && f.fs.policy.ParallelDirectWrites
}

// ParallelAppends reports whether appends to the file (O_APPEND, or
// RWFAppend) run in parallel (Policy.ParallelAppends), so that an async
// submission layer need not serialise them per inode either: they reserve
// their ranges and publish the size in reservation order themselves.
func (f *File) ParallelAppends() bool { return f.fs.policy.ParallelAppends }
