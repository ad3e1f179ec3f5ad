package fuseserver

import (
	"github.com/hanwen/go-fuse/v2/fuse"
)

// AsyncIO is a FileSystem that can start a READ or a WRITE without
// blocking, so that an io_uring queue's owner thread starts it itself
// instead of handing it to a goroutine: the engine's "issue without
// waiting, punt what would block" model (sluice's ReadAsync/WriteAsync).
type AsyncIO interface {
	// TryRead tries to serve a READ into dest (the ring entry's payload
	// buffer, in.Size bytes at most) without blocking. It returns
	// AsyncDone with the bytes read and the status, AsyncQueued when
	// device I/O was submitted and done(n, status) will be called once,
	// later, from another goroutine, or AsyncWouldBlock, with nothing
	// done, when the request must be served by Read from a goroutine
	// that may block.
	TryRead(in *fuse.ReadIn, dest []byte, done func(n int, st fuse.Status)) (AsyncResult, int, fuse.Status)
	// TryWrite is TryRead for a WRITE of data (in the ring entry's payload
	// buffer); n is the bytes written.
	TryWrite(in *fuse.WriteIn, data []byte, done func(n int, st fuse.Status)) (AsyncResult, int, fuse.Status)
}

// AsyncResult says how an AsyncIO call ended.
type AsyncResult int

const (
	// AsyncWouldBlock: nothing was done; serve the request the blocking
	// way.
	AsyncWouldBlock AsyncResult = iota
	// AsyncDone: served; the result is returned.
	AsyncDone
	// AsyncQueued: submitted; done will be called with the result.
	AsyncQueued
)
