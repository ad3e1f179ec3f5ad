package fusefs

import (
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/fuseserver"
)

// FS is a fuseserver.AsyncIO: an io_uring queue's owner thread starts
// READs and WRITEs itself, through the engine's non-blocking ReadAsync and
// WriteAsync, instead of handing them to a goroutine: aligned ones on
// engine-direct handles (queued at the device, or answered at once),
// unaligned WRITEs there on the buffered companion, and everything on
// handles of sluice's cache (answered at once when they find the pages
// and the lock free). What the engine cannot do without blocking (a lock
// held, a page to read first, a direct write that would allocate or
// extend, a write that must sync, a cache miss) comes back as
// AsyncWouldBlock and is served by Read or Write; so are unaligned reads
// and buffers that need a bounce.
var _ fuseserver.AsyncIO = (*FS)(nil)

// TryRead implements fuseserver.AsyncIO.
func (fs *FS) TryRead(in *fuse.ReadIn, dest []byte, done func(n int, st fuse.Status)) (fuseserver.AsyncResult, int, fuse.Status) {
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return fuseserver.AsyncDone, 0, st
	}
	off, size := int64(in.Offset), min(int(in.Size), len(dest))
	dst := dest[:size]
	if h.engineDirect && !fs.directOK(dst, off) {
		return fuseserver.AsyncWouldBlock, 0, fuse.OK // Read bounces it
	}
	c := fs.newAsyncCall(opRead, in.NodeId, done)
	n, err := h.f.ReadAsync(dst, off, 0, nil, c.fn)
	if err == nil && n < len(dst) && !h.engineDirect {
		// A buffered NOWAIT read stops at the first page it would wait
		// for, and FUSE takes a short READ for the end of the file (a
		// page fault past it is SIGBUS): Read reads it whole.
		c.free()
		return fuseserver.AsyncWouldBlock, 0, fuse.OK
	}
	return c.result(n, err)
}

// TryWrite implements fuseserver.AsyncIO.
func (fs *FS) TryWrite(in *fuse.WriteIn, data []byte, done func(n int, st fuse.Status)) (fuseserver.AsyncResult, int, fuse.Status) {
	if fs.writeHook.Load() != nil {
		return fuseserver.AsyncWouldBlock, 0, fuse.OK // tests that hook Write
	}
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return fuseserver.AsyncDone, 0, st
	}
	off := int64(in.Offset)
	f, bounce, err := fs.writeFile(h, data, off)
	if err != nil || bounce {
		return fuseserver.AsyncWouldBlock, 0, fuse.OK // Write reports or copies
	}
	c := fs.newAsyncCall(opWrite, in.NodeId, done)
	n, err := f.WriteAsync(data, off, writeFlags(in), c.fn)
	if err == nil && n < len(data) {
		// A NOWAIT write stops short at a page it cannot take, but a
		// WRITE's reply must cover it all (a short one is a short
		// write(2), or data the kernel's writeback drops): Write writes
		// it whole, the first n bytes again, which is what a write
		// serialised after any that raced with it would leave.
		c.free()
		return fuseserver.AsyncWouldBlock, 0, fuse.OK
	}
	res, n, st := c.result(n, err)
	if res != fuseserver.AsyncWouldBlock {
		fs.countUnaligned(h, f)
	}
	return res, n, st
}

// asyncCall is one READ or WRITE started by TryRead or TryWrite. It is
// pooled, its completion bound once, so that starting one allocates
// nothing. It lives until the engine call returns, or, if the engine
// queued it, until its completion has run.
type asyncCall struct {
	fs   *FS
	op   op
	node uint64
	t    time.Time
	done func(n int, st fuse.Status) // the server's
	fn   func(n int, err error)      // complete, bound once
}

var asyncCallPool = sync.Pool{New: func() any { return new(asyncCall) }}

func (fs *FS) newAsyncCall(o op, node uint64, done func(n int, st fuse.Status)) *asyncCall {
	c := asyncCallPool.Get().(*asyncCall)
	if c.fn == nil {
		c.fn = c.complete
	}
	c.fs, c.op, c.node, c.t, c.done = fs, o, node, fs.start(), done
	return c
}

func (c *asyncCall) free() {
	*c = asyncCall{fn: c.fn}
	asyncCallPool.Put(c)
}

// result turns the engine call's return into the server's: queued (the
// completion answers), would block (nothing happened), or done.
func (c *asyncCall) result(n int, err error) (fuseserver.AsyncResult, int, fuse.Status) {
	switch {
	case err == sluice.ErrQueued:
		return fuseserver.AsyncQueued, 0, fuse.OK
	case errors.Is(err, syscall.EAGAIN):
		c.free()
		return fuseserver.AsyncWouldBlock, 0, fuse.OK
	}
	n, st := c.finish(n, err)
	c.free()
	return fuseserver.AsyncDone, n, st
}

// finish records the call's latency and converts its result, as Read and
// Write do: a short write that wrote something succeeds.
func (c *asyncCall) finish(n int, err error) (int, fuse.Status) {
	c.fs.done(c.op, c.t)
	if err == nil || (c.op == opWrite && n > 0) {
		return n, fuse.OK
	}
	name := "read"
	if c.op == opWrite {
		name = "write"
	}
	return 0, c.fs.toStatus(name, c.node, err)
}

// complete is a queued call's completion, on the device's completion
// goroutine.
func (c *asyncCall) complete(n int, err error) {
	done := c.done
	n, st := c.finish(n, err)
	c.free()
	done(n, st)
}
