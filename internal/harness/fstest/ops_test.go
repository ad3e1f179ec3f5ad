package fstest

import (
	"fmt"
	"syscall"
	"time"
)

// Shorthands for building Ops in tables.

const (
	rdonly = syscall.O_RDONLY
	wronly = syscall.O_WRONLY
	rdwr   = syscall.O_RDWR
	creat  = syscall.O_CREAT
	excl   = syscall.O_EXCL
	trunc  = syscall.O_TRUNC
	appnd  = syscall.O_APPEND
	direct = syscall.O_DIRECT

	keepSize      = 0x01
	punchHole     = 0x02
	collapseRange = 0x08
	zeroRange     = 0x10
	insertRange   = 0x20
	unshareRange  = 0x40

	seekData = 3
	seekHole = 4

	renameNoReplace = 1
	renameExchange  = 2
	xattrCreate     = 1
	xattrReplace    = 2
)

func openOp(slot int, path string, flags int) Op {
	return Op{Kind: OpOpen, Slot: slot, Path: path, Flags: flags, Perm: 0o644}
}
func closeOp(slot int) Op { return Op{Kind: OpClose, Slot: slot} }
func preadOp(slot int, off, n int64) Op {
	return Op{Kind: OpPread, Slot: slot, Off: off, Len: n}
}
func pwriteOp(slot int, off, n int64, seed byte) Op {
	return Op{Kind: OpPwrite, Slot: slot, Off: off, Len: n, Seed: seed}
}
func atomicOp(slot int, off, n int64, seed byte) Op {
	return Op{Kind: OpPwriteAtomic, Slot: slot, Off: off, Len: n, Seed: seed}
}
func readOp(slot int, n int64) Op { return Op{Kind: OpRead, Slot: slot, Len: n} }
func writeOp(slot int, n int64, seed byte) Op {
	return Op{Kind: OpWrite, Slot: slot, Len: n, Seed: seed}
}
func seekOp(slot int, off int64, whence int) Op {
	return Op{Kind: OpSeek, Slot: slot, Off: off, Flags: whence}
}
func ftruncOp(slot int, size int64) Op { return Op{Kind: OpFtruncate, Slot: slot, Off: size} }
func fallocOp(slot int, mode int, off, n int64) Op {
	return Op{Kind: OpFallocate, Slot: slot, Flags: mode, Off: off, Len: n}
}
func fsyncOp(slot int) Op           { return Op{Kind: OpFsync, Slot: slot} }
func fdatasyncOp(slot int) Op       { return Op{Kind: OpFdatasync, Slot: slot} }
func fstatOp(slot int) Op           { return Op{Kind: OpFstat, Slot: slot} }
func freaddirOp(slot int) Op        { return Op{Kind: OpFreadDir, Slot: slot} }
func statOp(p string) Op            { return Op{Kind: OpStat, Path: p} }
func statTimesOp(p string) Op       { return Op{Kind: OpStat, Path: p, Times: true} }
func lstatOp(p string) Op           { return Op{Kind: OpLstat, Path: p} }
func mkdirOp(p string) Op           { return Op{Kind: OpMkdir, Path: p, Perm: 0o755} }
func readdirOp(p string) Op         { return Op{Kind: OpReadDir, Path: p} }
func unlinkOp(p string) Op          { return Op{Kind: OpUnlink, Path: p} }
func rmdirOp(p string) Op           { return Op{Kind: OpRmdir, Path: p} }
func linkOp(old, new string) Op     { return Op{Kind: OpLink, Path: old, Path2: new} }
func symlinkOp(tgt, p string) Op    { return Op{Kind: OpSymlink, Path: tgt, Path2: p} }
func readlinkOp(p string) Op        { return Op{Kind: OpReadlink, Path: p} }
func chmodOp(p string, m uint32) Op { return Op{Kind: OpChmod, Path: p, Perm: m} }
func truncOp(p string, size int64) Op {
	return Op{Kind: OpTruncate, Path: p, Off: size}
}
func renameOp(old, new string, flags int) Op {
	return Op{Kind: OpRename, Path: old, Path2: new, Flags: flags}
}
func chownOp(p string, uid, gid int) Op { return Op{Kind: OpChown, Path: p, Uid: uid, Gid: gid} }
func utimesOp(p string, atime, mtime time.Time) Op {
	return Op{Kind: OpUtimes, Path: p, Atime: atime, Mtime: mtime}
}
func getxOp(p, name string) Op { return Op{Kind: OpGetxattr, Path: p, Name: name} }
func setxOp(p, name, value string, flags int) Op {
	return Op{Kind: OpSetxattr, Path: p, Name: name, Value: []byte(value), Flags: flags}
}

// cloneOp is FICLONE on dst from src.
func cloneOp(dst, src int) Op { return Op{Kind: OpClone, Slot: dst, Slot2: src} }

// cloneRangeOp is FICLONERANGE on dst: struct file_clone_range's order.
func cloneRangeOp(dst, src int, srcOff, n, dstOff int64) Op {
	return Op{Kind: OpCloneRange, Slot: dst, Off: dstOff, Slot2: src, Off2: srcOff, Len: n}
}

// dedupeOp is FIDEDUPERANGE on src with one destination.
func dedupeOp(src int, srcOff, n int64, dst int, dstOff int64) Op {
	return Op{Kind: OpDedupeRange, Slot: src, Off: srcOff, Slot2: dst, Off2: dstOff, Len: n}
}

// exchangeOp is XFS_IOC_EXCHANGE_RANGE on file2.
func exchangeOp(file2, file1 int, off1, off2, n int64, flags int) Op {
	return Op{Kind: OpExchangeRange, Slot: file2, Off: off2, Slot2: file1, Off2: off1, Len: n, Flags: flags}
}

func listxOp(p string) Op         { return Op{Kind: OpListxattr, Path: p} }
func rmxOp(p, name string) Op     { return Op{Kind: OpRemovexattr, Path: p, Name: name} }
func misalign(op Op, n int) Op    { op.Misalign = n; return op }
func withPerm(op Op, m uint32) Op { op.Perm = m; return op }

// setupSlot is the handle slot that file() uses.
const setupSlot = 15

// file creates path holding n bytes of pattern seed.
func file(path string, n int64, seed byte) []Op {
	ops := []Op{openOp(setupSlot, path, rdwr|creat|trunc)}
	if n > 0 {
		ops = append(ops, pwriteOp(setupSlot, 0, n, seed))
	}
	return append(ops, closeOp(setupSlot))
}

// seq flattens Ops and []Ops into one list.
func seq(items ...any) []Op {
	var out []Op
	for _, it := range items {
		switch x := it.(type) {
		case Op:
			out = append(out, x)
		case []Op:
			out = append(out, x...)
		default:
			panic(fmt.Sprintf("seq: %T", it))
		}
	}
	return out
}
