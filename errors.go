package sluice

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Errors returned by the engine are *os.PathError (or *os.LinkError for
// two-path calls) values that name the operation and the path, around a
// syscall.Errno that matches what Linux returns for the same call. Causes
// from below (device and metadata failures) stay in the chain, so both
// errors.Is(err, syscall.EIO) and errors.As(err, &deviceErr) work.

// ErrShutdown is wrapped by every error of an FS that stopped itself after
// its metadata could no longer be written, or a device flush failed (the
// analogue of an XFS shutdown on a log I/O error): nothing more is changed
// on the volume, so what it holds stays consistent, and no write whose
// durability is unknown is ever reported durable. Such errors also match
// syscall.EIO.
var ErrShutdown = errors.New("sluice: file system shut down")

// ioError marks a lower-layer failure as EIO while keeping the cause.
type ioError struct{ err error }

func (e *ioError) Error() string   { return e.err.Error() }
func (e *ioError) Unwrap() []error { return []error{e.err, syscall.EIO} }

// eio wraps a device or metadata error so that errors.Is(err, syscall.EIO)
// holds. A nil or already-errno-carrying error is returned as is.
func eio(err error) error {
	if err == nil {
		return nil
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return err
	}
	return &ioError{err}
}

func pathErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}

func linkErr(op, oldpath, newpath string, err error) error {
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op, Old: oldpath, New: newpath, Err: err}
}

// errnof returns an error that is errno, with a message for people.
func errnof(errno syscall.Errno, format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errno)...)
}
