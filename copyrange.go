package sluice

import (
	"syscall"

	"github.com/sluicefs/sluice/iolock"
)

// What a copy_file_range(2) made of reads, writes and hole punches (the
// FUSE adapter's COPY_FILE_RANGE) needs of the engine beyond them: a size
// change that leaves a hole, and a write's effect on the attributes for a
// range that is not written.

// Extend grows the file to size bytes if it is shorter, leaving the new
// range a hole, as a truncate that grows does (mtime and ctime change); a
// file of size bytes or more is left alone, times included. Unlike
// Truncate it decides under the file's I/O lock, so it never cuts off what
// a concurrent write put past size. The file must be open for writing.
func (f *File) Extend(size int64) error {
	if size < 0 {
		return pathErr("extend", f.name, syscall.EINVAL)
	}
	if err := f.begin(); err != nil {
		return pathErr("extend", f.name, err)
	}
	defer f.end()
	var err error
	if !f.writable() {
		err = syscall.EBADF
	} else {
		err = f.in.extend(size)
	}
	return pathErr("extend", f.name, err)
}

// Modified does to the file's attributes what a write does before it
// writes (file_modified, xfs_file_write_checks): it clears set-user-ID,
// set-group-ID with group execute and security.capability unless flags
// has RWFKeepPrivs, and sets mtime and ctime to now (persisted at the next
// sync point, as a write's). It is for a change of contents that is not
// a write through a File, such as the holes a copy_file_range copies. The
// file must be open for writing; only RWFKeepPrivs is looked at.
func (f *File) Modified(flags RWFlags) error {
	if err := f.begin(); err != nil {
		return pathErr("modified", f.name, err)
	}
	defer f.end()
	if !f.writable() {
		return pathErr("modified", f.name, syscall.EBADF)
	}
	in := f.in
	if err := in.fs.writable(); err != nil {
		return pathErr("modified", f.name, err)
	}
	if flags&RWFKeepPrivs == 0 && in.needsPrivStrip() {
		// stripPrivs wants the I/O lock exclusive, as writeChecks
		// holds it.
		in.io.Lock(iolock.Exclusive)
		err := in.stripPrivs()
		in.io.Unlock(iolock.Exclusive)
		if err != nil {
			return pathErr("modified", f.name, err)
		}
	}
	in.touchMtime()
	return nil
}
