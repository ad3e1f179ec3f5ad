package sluice

import (
	"syscall"
	"time"

	"github.com/sluicefs/sluice/meta"
)

// Ino is an inode number.
type Ino = meta.Ino

// RootIno is the inode number of the root directory.
const RootIno = meta.RootIno

// Attr holds the attributes of an inode, as stat(2) reports them.
type Attr struct {
	Ino   Ino
	Mode  uint32 // file type (S_IFMT bits) and permissions
	Nlink uint32
	Uid   uint32
	Gid   uint32
	Rdev  uint32
	Size  int64
	// Blocks is the space allocated, in 512 B units.
	Blocks  int64
	Blksize int32
	Atime   time.Time
	Mtime   time.Time
	Ctime   time.Time
	// Gen is the inode generation: an inode number reused after a file is
	// freed comes with a different generation.
	Gen uint64
	// Parent is, for a directory, the directory holding it (its "..";
	// the root is its own parent). Zero for other file types.
	Parent Ino
}

// IsDir reports whether the inode is a directory.
func (a *Attr) IsDir() bool { return isDir(a.Mode) }

// IsRegular reports whether the inode is a regular file.
func (a *Attr) IsRegular() bool { return isReg(a.Mode) }

// attrLocked returns in's attributes.
//
// Preconditions: in.mu is held.
func (in *inode) attrLocked() (Attr, error) {
	a := &in.attr
	out := Attr{
		Ino: in.ino, Mode: a.Mode, Nlink: a.Nlink, Uid: a.Uid, Gid: a.Gid, Rdev: a.Rdev,
		Size:    int64(a.Size),
		Blksize: int32(in.fs.blockSize),
		Atime:   time.Unix(0, a.Atime), Mtime: time.Unix(0, a.Mtime), Ctime: time.Unix(0, a.Ctime),
		Gen: a.Gen,
	}
	if isDir(a.Mode) {
		out.Parent = a.Parent
	}
	switch {
	case isReg(a.Mode):
		m, err := in.extentsLocked()
		if err != nil {
			return Attr{}, err
		}
		out.Blocks = int64(m.Blocks()) * in.fs.blockSize / 512
	case isDir(a.Mode):
		out.Size = in.fs.blockSize
		out.Blocks = in.fs.blockSize / 512
	}
	return out, nil
}

// attr returns in's attributes.
func (in *inode) getattr() (Attr, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.attrLocked()
}

// SetAttr says which attributes Setattr changes: nil fields stay.
type SetAttr struct {
	Mode  *uint32 // permission bits only (and suid/sgid/sticky)
	Uid   *uint32
	Gid   *uint32
	Size  *int64
	Atime *time.Time
	Mtime *time.Time
	// AtimeNow and MtimeNow set the time to now (UTIME_NOW).
	AtimeNow bool
	MtimeNow bool
	// Chown marks a chown(2), even one that changes neither owner nor
	// group (chown(f, -1, -1), which Uid and Gid nil cannot say): as
	// every chown on Linux (chown_common, notify_change), it updates
	// ctime and, on a non-directory, clears set-user-ID, set-group-ID
	// with group execute, and security.capability. Uid or Gid set imply
	// it.
	Chown bool
}

// Statfs describes the file system, as statfs(2) reports it.
type Statfs struct {
	BlockSize   int64
	Blocks      uint64 // data blocks in all
	BlocksFree  uint64
	BlocksAvail uint64
	Files       uint64
	FilesFree   uint64
	NameLen     int
}

// Statfs reports space usage.
func (fs *FS) Statfs() (Statfs, error) {
	st := fs.alloc.Stats()
	fs.commitMu.Lock()
	next := fs.commit.nextIno
	fs.commitMu.Unlock()
	return Statfs{
		BlockSize:   fs.blockSize,
		Blocks:      fs.devBlocks - fs.dataStart,
		BlocksFree:  st.FreeBlocks,
		BlocksAvail: st.AvailableBlocks,
		Files:       1 << 40,
		FilesFree:   1<<40 - uint64(next),
		NameLen:     maxNameLen,
	}, nil
}

// maxNameLen is the longest name a directory entry may have, as on Linux.
const maxNameLen = 255

// maxPathLen is the longest path the path-based API accepts (PATH_MAX).
const maxPathLen = 4096

// maxFileSize is the largest file offset plus one (as XFS and ext4 report
// s_maxbytes, capped to what the block count can address).
const maxFileSize = 1<<63 - 1

func fileTypeOf(mode uint32) uint32 { return mode & syscall.S_IFMT }
