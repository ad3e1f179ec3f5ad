package crashtest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
)

// OpKind names a workload operation.
type OpKind uint8

const (
	OpCreate        OpKind = iota // OpenFile(Path, O_CREAT|O_EXCL|Flags) into slot H
	OpOpen                        // OpenFile(Path, Flags) into slot H (Flags may hold O_TRUNC)
	OpClose                       // handle H.Close
	OpWrite                       // handle H.Pwrite(N bytes at Off, RWFlags Flags)
	OpFsync                       // handle H.Fsync (Flags 1: Fdatasync)
	OpFsyncDir                    // OpenFile(Path, O_RDONLY|O_DIRECTORY).Fsync
	OpSyncAll                     // FS.SyncAll
	OpFallocate                   // handle H.Fallocate(Flags, Off, N)
	OpTruncate                    // handle H.Truncate(Off), or FS.Truncate(Path, Off) if H < 0
	OpRename                      // FS.Rename(Path, Path2, 0)
	OpLink                        // FS.Link(Path, Path2)
	OpUnlink                      // FS.Unlink(Path)
	OpMkdir                       // FS.Mkdir(Path)
	OpRmdir                       // FS.Rmdir(Path)
	OpRead                        // handle H.Pread(N bytes at Off), compared with the model
	OpWriteParallel               // handle H.Pwrite of each range of Ranges, at once, from several goroutines, with Flags (RWFlags)
	OpClone                       // handle H.CloneRange(handle H2, Off2, Off, N) (FICLONERANGE), or H.Clone(H2) (FICLONE) if Flags is 1
	OpCollapse                    // handle H.Fallocate(FallocCollapseRange, Off, N)
	OpInsert                      // handle H.Fallocate(FallocInsertRange, Off, N)
)

// Op is one workload operation. Ops are generated from the model, so every
// op of a generated sequence is valid when it runs; an op that refers to a
// handle slot or name that no longer exists (a shortened sequence) is
// skipped.
type Op struct {
	Kind   OpKind
	Path   string
	Path2  string
	H      int
	Off, N int64
	Flags  int
	// H2 and Off2 are a clone's source handle and offset.
	H2   int
	Off2 int64
	// Ranges are the disjoint (offset, length) pairs of OpWriteParallel.
	Ranges [][2]int64
	// Seq is set when the op runs: the sequence number of its (first)
	// write, as the sector tags and failure reports name it (wN).
	Seq uint64
}

func (o Op) String() string {
	s := o.string()
	if o.Seq != 0 {
		s += " -> w" + itoa(o.Seq)
	}
	return s
}

func (o Op) string() string {
	switch o.Kind {
	case OpCreate:
		return fmt.Sprintf("h%d = create(%q, %s)", o.H, o.Path, openFlags(o.Flags))
	case OpOpen:
		return fmt.Sprintf("h%d = open(%q, %s)", o.H, o.Path, openFlags(o.Flags))
	case OpClose:
		return fmt.Sprintf("h%d.Close()", o.H)
	case OpWrite:
		s := fmt.Sprintf("h%d.Pwrite(off=%d, n=%d", o.H, o.Off, o.N)
		if o.Flags&int(sluice.RWFAtomic) != 0 {
			s += ", RWFAtomic"
		}
		if o.Flags&int(sluice.RWFDsync) != 0 {
			s += ", RWFDsync"
		}
		if o.Flags&int(sluice.RWFAppend) != 0 {
			s += ", RWFAppend"
		}
		return s + ")"
	case OpFsync:
		if o.Flags == 1 {
			return fmt.Sprintf("h%d.Fdatasync()", o.H)
		}
		return fmt.Sprintf("h%d.Fsync()", o.H)
	case OpFsyncDir:
		return fmt.Sprintf("fsyncdir(%q)", o.Path)
	case OpSyncAll:
		return "SyncAll()"
	case OpFallocate:
		return fmt.Sprintf("h%d.Fallocate(%s, off=%d, n=%d)", o.H, fallocMode(o.Flags), o.Off, o.N)
	case OpTruncate:
		if o.H < 0 {
			return fmt.Sprintf("Truncate(%q, %d)", o.Path, o.Off)
		}
		return fmt.Sprintf("h%d.Truncate(%d)", o.H, o.Off)
	case OpRename:
		return fmt.Sprintf("Rename(%q, %q)", o.Path, o.Path2)
	case OpLink:
		return fmt.Sprintf("Link(%q, %q)", o.Path, o.Path2)
	case OpUnlink:
		return fmt.Sprintf("Unlink(%q)", o.Path)
	case OpMkdir:
		return fmt.Sprintf("Mkdir(%q)", o.Path)
	case OpRmdir:
		return fmt.Sprintf("Rmdir(%q)", o.Path)
	case OpRead:
		return fmt.Sprintf("h%d.Pread(off=%d, n=%d) and compare", o.H, o.Off, o.N)
	case OpWriteParallel:
		if o.Flags&int(sluice.RWFAtomic) != 0 {
			return fmt.Sprintf("h%d.Pwrite(RWFAtomic) at once of %v", o.H, o.Ranges)
		}
		return fmt.Sprintf("h%d.Pwrite at once of %v", o.H, o.Ranges)
	case OpClone:
		if o.Flags == 1 {
			return fmt.Sprintf("h%d.Clone(h%d)", o.H, o.H2)
		}
		return fmt.Sprintf("h%d.CloneRange(h%d, srcOff=%d, dstOff=%d, n=%d)", o.H, o.H2, o.Off2, o.Off, o.N)
	case OpCollapse:
		return fmt.Sprintf("h%d.Fallocate(COLLAPSE_RANGE, off=%d, n=%d)", o.H, o.Off, o.N)
	case OpInsert:
		return fmt.Sprintf("h%d.Fallocate(INSERT_RANGE, off=%d, n=%d)", o.H, o.Off, o.N)
	}
	return fmt.Sprintf("op(%d)", o.Kind)
}

func openFlags(fl int) string {
	var s []string
	for _, f := range []struct {
		bit  int
		name string
	}{{sluice.O_DIRECT, "O_DIRECT"}, {sluice.O_SYNC, "O_SYNC"}, {sluice.O_DSYNC, "O_DSYNC"}, {sluice.O_TRUNC, "O_TRUNC"}, {sluice.O_APPEND, "O_APPEND"}} {
		if fl&f.bit == f.bit {
			s = append(s, f.name)
			fl &^= f.bit
		}
	}
	if len(s) == 0 {
		return "0"
	}
	return strings.Join(s, "|")
}

func fallocMode(m int) string {
	switch m {
	case 0:
		return "0"
	case sluice.FallocKeepSize:
		return "KEEP_SIZE"
	case sluice.FallocKeepSize | sluice.FallocPunchHole:
		return "PUNCH_HOLE|KEEP_SIZE"
	case sluice.FallocZeroRange:
		return "ZERO_RANGE"
	case sluice.FallocZeroRange | sluice.FallocKeepSize:
		return "ZERO_RANGE|KEEP_SIZE"
	case sluice.FallocUnshareRange:
		return "UNSHARE_RANGE"
	case sluice.FallocUnshareRange | sluice.FallocKeepSize:
		return "UNSHARE_RANGE|KEEP_SIZE"
	}
	return fmt.Sprintf("%#x", m)
}

// handle is an open file of a worker.
type handle struct {
	f      *sluice.File
	fm     *fileModel
	direct bool
	dsync  bool // O_DSYNC or O_SYNC
	sync   bool // O_SYNC: every write a sync point
	append bool // O_APPEND: writes go to EOF whatever their offset
}

// shared is what the workers of one case share.
type shared struct {
	fs        *sluice.FS
	blockSize int64
	// seq hands out write sequence numbers (from 1).
	seq atomic.Uint64
	// maxFileBytes bounds file offsets.
	maxFileBytes int64
	// ioUnit is the device's I/O unit: O_DIRECT alignment.
	ioUnit int64
}

// worker runs ops on its own subtree and files, and keeps their model.
type worker struct {
	sh   *shared
	id   int
	root string // "/" for the whole file system, else "/wN"
	rng  *rand.Rand

	// mu guards m (the crasher snapshots it while the worker runs).
	mu sync.Mutex
	m  *model

	handles []*handle
	names   int
	// log lists the ops run, in order.
	log []Op
	// started and done count ops, for the crasher.
	started, done atomic.Int64
}

func newWorker(sh *shared, id int, root string, seed uint64, m *model) *worker {
	return &worker{sh: sh, id: id, root: root, rng: newRand(seed, uint64(id)+100), m: m}
}

// paths returns the sorted paths of files (dirs false) or directories (dirs
// true; the root included as the worker's root path).
func (w *worker) paths(dirs bool) []string {
	var out []string
	if dirs {
		out = append(out, w.root)
	}
	for p, e := range w.m.ns {
		if e.dir == dirs {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (w *worker) pick(s []string) string { return s[w.rng.IntN(len(s))] }

func (w *worker) newName(prefix string) string {
	w.names++
	return fmt.Sprintf("%s%d", prefix, w.names)
}

// freeSlot returns the first free handle slot.
func (w *worker) freeSlot() int {
	for i, h := range w.handles {
		if h == nil {
			return i
		}
	}
	w.handles = append(w.handles, nil)
	return len(w.handles) - 1
}

func (w *worker) openSlots() []int {
	var out []int
	for i, h := range w.handles {
		if h != nil {
			out = append(out, i)
		}
	}
	return out
}

func (w *worker) randomOpenFlags() int {
	fl := 0
	direct := w.rng.IntN(2) == 0
	if direct {
		fl |= sluice.O_DIRECT
	}
	switch w.rng.IntN(30) {
	case 0, 1:
		fl |= sluice.O_DSYNC
	case 2:
		fl |= sluice.O_SYNC
	}
	if w.rng.IntN(15) == 0 && !(direct && w.sh.ioUnit > SectorSize) {
		// (An O_DIRECT append needs EOF aligned to the I/O unit.)
		fl |= sluice.O_APPEND
	}
	return fl
}

// gen returns the next op, chosen from the model.
func (w *worker) gen() Op {
	files := w.paths(false)
	slots := w.openSlots()
	r := w.rng.IntN(100)
	if len(files) == 0 && len(slots) == 0 {
		r = 0 // nothing to work on: create
	}
	switch {
	case r < 7 || (len(slots) == 0 && r < 60):
		if len(slots) >= 8 {
			return Op{Kind: OpClose, H: slots[w.rng.IntN(len(slots))]}
		}
		dir := w.pick(w.paths(true))
		return Op{Kind: OpCreate, Path: path.Join(dir, w.newName("f")), H: w.freeSlot(), Flags: w.randomOpenFlags()}
	case r < 11 && len(files) > 0:
		if len(slots) >= 8 {
			return Op{Kind: OpClose, H: slots[w.rng.IntN(len(slots))]}
		}
		fl := w.randomOpenFlags()
		if w.rng.IntN(8) == 0 {
			fl |= sluice.O_TRUNC
		}
		return Op{Kind: OpOpen, Path: w.pick(files), H: w.freeSlot(), Flags: fl}
	case r < 15 && len(slots) > 0:
		return Op{Kind: OpClose, H: slots[w.rng.IntN(len(slots))]}
	case r < 47 && len(slots) > 0:
		return w.genWrite(slots[w.rng.IntN(len(slots))])
	case r < 51 && len(slots) > 0:
		return Op{Kind: OpFsync, H: slots[w.rng.IntN(len(slots))], Flags: w.rng.IntN(2)}
	case r < 52:
		if w.rng.IntN(2) == 0 {
			return Op{Kind: OpFsyncDir, Path: w.pick(w.paths(true))}
		}
		return Op{Kind: OpSyncAll}
	case r < 59 && len(slots) > 0:
		h := slots[w.rng.IntN(len(slots))]
		mode := []int{0, sluice.FallocKeepSize, sluice.FallocKeepSize | sluice.FallocPunchHole,
			sluice.FallocKeepSize | sluice.FallocPunchHole, sluice.FallocZeroRange,
			sluice.FallocZeroRange | sluice.FallocKeepSize,
			sluice.FallocUnshareRange, sluice.FallocUnshareRange | sluice.FallocKeepSize}[w.rng.IntN(8)]
		off, n := w.genRange(w.handles[h].fm, SectorSize)
		return Op{Kind: OpFallocate, H: h, Flags: mode, Off: off, N: n}
	case r < 67 && len(slots) > 0:
		if op, ok := w.genClone(slots); ok {
			return op
		}
		return w.genWrite(slots[w.rng.IntN(len(slots))])
	case r < 71 && len(slots) > 0:
		if op, ok := w.genShift(slots[w.rng.IntN(len(slots))]); ok {
			return op
		}
		return w.genWrite(slots[w.rng.IntN(len(slots))])
	case r < 76 && (len(slots) > 0 || len(files) > 0):
		var fm *fileModel
		op := Op{Kind: OpTruncate, H: -1}
		if len(slots) > 0 && (len(files) == 0 || w.rng.IntN(3) > 0) {
			op.H = slots[w.rng.IntN(len(slots))]
			fm = w.handles[op.H].fm
		} else {
			op.Path = w.pick(files)
			fm = w.m.byIno[w.m.ns[op.Path].ino]
		}
		switch w.rng.IntN(4) {
		case 0:
			op.Off = 0
		case 1:
			op.Off = fm.size / 2 / SectorSize * SectorSize
		case 2:
			op.Off = fm.size + int64(1+w.rng.IntN(32))*SectorSize
		default:
			op.Off = int64(w.rng.Int64N(w.sh.maxFileBytes/SectorSize)) * SectorSize
		}
		return op
	case r < 81 && len(files) > 0:
		if w.rng.IntN(8) == 0 {
			if dirs := w.paths(true)[1:]; len(dirs) > 0 {
				src := w.pick(dirs)
				var dsts []string
				for _, d := range w.paths(true) {
					if d != src && !strings.HasPrefix(d, src+"/") {
						dsts = append(dsts, d)
					}
				}
				return Op{Kind: OpRename, Path: src, Path2: path.Join(w.pick(dsts), w.newName("d"))}
			}
		}
		src := w.pick(files)
		var dst string
		if w.rng.IntN(5) < 2 && len(files) > 1 {
			dst = w.pick(files)
		} else {
			dst = path.Join(w.pick(w.paths(true)), w.newName("f"))
		}
		return Op{Kind: OpRename, Path: src, Path2: dst}
	case r < 83 && len(files) > 0:
		return Op{Kind: OpLink, Path: w.pick(files), Path2: path.Join(w.pick(w.paths(true)), w.newName("f"))}
	case r < 89 && len(files) > 0:
		return Op{Kind: OpUnlink, Path: w.pick(files)}
	case r < 91:
		var dirs []string
		for _, d := range w.paths(true) {
			if strings.Count(d[len(w.root):], "/") < 3 {
				dirs = append(dirs, d)
			}
		}
		return Op{Kind: OpMkdir, Path: path.Join(w.pick(dirs), w.newName("d"))}
	case r < 92:
		if empty := w.emptyDirs(); len(empty) > 0 {
			return Op{Kind: OpRmdir, Path: w.pick(empty)}
		}
		return Op{Kind: OpSyncAll}
	case len(slots) > 0:
		h := slots[w.rng.IntN(len(slots))]
		off, n := w.genRange(w.handles[h].fm, w.align(w.handles[h]))
		return Op{Kind: OpRead, H: h, Off: off, N: n}
	}
	dir := w.pick(w.paths(true))
	return Op{Kind: OpCreate, Path: path.Join(dir, w.newName("f")), H: w.freeSlot(), Flags: w.randomOpenFlags()}
}

// emptyDirs returns the worker's directories (not its root) without entries.
func (w *worker) emptyDirs() []string {
	var out []string
	for _, d := range w.paths(true)[1:] {
		empty := true
		for p := range w.m.ns {
			if strings.HasPrefix(p, d+"/") {
				empty = false
				break
			}
		}
		if empty {
			out = append(out, d)
		}
	}
	return out
}

// align returns the alignment of a read or write through h: 512 B for
// buffered I/O; for O_DIRECT, the device's I/O unit or (half the time) the
// block size.
func (w *worker) align(h *handle) int64 {
	switch {
	case !h.direct:
		return SectorSize
	case w.rng.IntN(2) == 0:
		return w.sh.blockSize
	}
	return w.sh.ioUnit
}

// genRange returns a range for a write, read or space op on file fm,
// aligned to align (a multiple of 512 B).
func (w *worker) genRange(fm *fileModel, align int64) (off, n int64) {
	size := fm.size
	maxOff := w.sh.maxFileBytes
	switch w.rng.IntN(5) {
	case 0:
		off = size // append
	case 1, 2:
		if size > 0 {
			off = w.rng.Int64N(size)
		}
	case 3:
		off = w.rng.Int64N(min(size+128<<10, maxOff))
	default:
		off = w.rng.Int64N(maxOff)
	}
	switch k := w.rng.IntN(20); {
	case k < 10:
		n = int64(1+w.rng.IntN(8)) * SectorSize
	case k < 17:
		n = int64(1+w.rng.IntN(32)) * SectorSize
	default:
		n = int64(1+w.rng.IntN(128)) * SectorSize
	}
	off = off / align * align
	n = (n + align - 1) / align * align
	if off+n > maxOff {
		off = max(0, maxOff-n) / align * align
	}
	return off, n
}

func (w *worker) genWrite(h int) Op {
	hd := w.handles[h]
	if hd.direct && !hd.append && w.rng.IntN(6) == 0 {
		// Direct writes of disjoint ranges of one file, all at once: the
		// engine's concurrent direct I/O paths (shared-lock aligned writes,
		// optimistic and exclusive sub-block ones).
		op := Op{Kind: OpWriteParallel, H: h}
		atomic := w.rng.IntN(3) == 0
		if atomic {
			op.Flags = int(sluice.RWFAtomic) // untorn: the copy-on-write route
		}
		for range 2 + w.rng.IntN(3) {
			off, n := w.genRange(hd.fm, w.align(hd))
			if atomic {
				// A power of two from a block to 64 KiB, aligned to itself.
				n = w.sh.blockSize << w.rng.IntN(5)
				off = min(off, max(0, w.sh.maxFileBytes-n)) / n * n
			}
			overlap := false
			for _, r := range op.Ranges {
				overlap = overlap || off < r[0]+r[1] && r[0] < off+n
			}
			if !overlap {
				op.Ranges = append(op.Ranges, [2]int64{off, n})
			}
		}
		return op
	}
	off, n := w.genRange(hd.fm, w.align(hd))
	op := Op{Kind: OpWrite, H: h, Off: off, N: n}
	if !hd.dsync && w.rng.IntN(16) == 0 {
		op.Flags = int(sluice.RWFDsync)
	}
	if !hd.append && !(hd.direct && w.sh.ioUnit > SectorSize) && w.rng.IntN(16) == 0 {
		// pwritev2's RWF_APPEND: this write only goes to EOF (and an
		// O_DIRECT one needs EOF aligned to the I/O unit).
		op.Flags |= int(sluice.RWFAppend)
	}
	return op
}

// genClone returns a clone between two open files, or within one (a
// quarter of the time): whole blocks, or up to the source's EOF (its
// unaligned tail included, where the destination's EOF allows it: the
// cloned range must reach it), at the source's offset, past the
// destination's EOF or anywhere below it; sometimes a whole-file FICLONE.
// ok is false if the files picked allow none.
func (w *worker) genClone(slots []int) (op Op, ok bool) {
	bs := w.sh.blockSize
	var dsts, srcs []int
	for _, s := range slots {
		if !w.handles[s].append {
			dsts = append(dsts, s) // FICLONE into an O_APPEND file is EBADF
		}
		if w.handles[s].fm.size > 0 {
			srcs = append(srcs, s)
		}
	}
	if len(dsts) == 0 || len(srcs) == 0 {
		return Op{}, false
	}
	for range 3 {
		d, s := dsts[w.rng.IntN(len(dsts))], srcs[w.rng.IntN(len(srcs))]
		dst, src := w.handles[d].fm, w.handles[s].fm
		if dst == src && w.rng.IntN(4) != 0 {
			continue // mostly two files
		}
		ssize, dsize := src.size, dst.size
		op = Op{Kind: OpClone, H: d, H2: s}
		if dst != src && w.rng.IntN(8) == 0 {
			op.Flags = 1 // FICLONE: the whole source at 0
		} else {
			op.Off2 = w.rng.Int64N(ssize) / bs * bs
			avail := ssize - op.Off2
			if w.rng.IntN(3) == 0 || avail < bs {
				op.N = avail // to EOF, unaligned if the source's EOF is
			} else {
				op.N = (1 + w.rng.Int64N(min(avail/bs, 16))) * bs
			}
			// (Destinations stay near the file's EOF: bigger files cost
			// every crash point more to check.)
			switch w.rng.IntN(4) {
			case 0, 1:
				op.Off = op.Off2
			case 2:
				op.Off = (dsize + bs - 1) / bs * bs
			default:
				op.Off = w.rng.Int64N(dsize/bs+2) * bs
			}
			if op.N%bs != 0 && op.Off+op.N < dsize {
				op.Off = (dsize - op.N + bs - 1) / bs * bs
			}
		}
		_, _, ok := w.cloneExtent(dst, src, op)
		if ok {
			return op, true
		}
	}
	return Op{}, false
}

// cloneExtent applies cloneExtent's rules to op, from src to dst, and keeps
// the destination within the workload's bound.
func (w *worker) cloneExtent(dst, src *fileModel, op Op) (count, bcount int64, ok bool) {
	if op.Flags == 1 {
		op.Off, op.Off2, op.N = 0, 0, 0
	}
	count, bcount, ok = cloneExtent(src.size, dst.size, op.Off2, op.Off, op.N, w.sh.blockSize, src == dst)
	return count, bcount, ok && op.Off+bcount <= w.sh.maxFileBytes
}

// genShift returns a collapse or insert range of whole blocks on handle h,
// within the rules (a collapse ends before EOF, an insert starts before
// it) and the workload's bound; ok is false if the file allows none.
func (w *worker) genShift(h int) (op Op, ok bool) {
	bs := w.sh.blockSize
	size := w.handles[h].fm.size
	if size == 0 {
		return Op{}, false
	}
	op = Op{Kind: OpInsert, H: h, Off: w.rng.Int64N(size) / bs * bs, N: int64(1+w.rng.IntN(4)) * bs}
	if w.rng.IntN(2) == 0 {
		op.Kind = OpCollapse
		op.N = min(op.N, (size-1-op.Off)/bs*bs)
	}
	return op, w.shiftValid(op)
}

// shiftValid reports whether the collapse or insert op may run now.
func (w *worker) shiftValid(op Op) bool {
	h := w.slot(op.H)
	if h == nil {
		return false
	}
	bs, size := w.sh.blockSize, h.fm.size
	if op.Off%bs != 0 || op.N%bs != 0 || op.N <= 0 {
		return false
	}
	if op.Kind == OpCollapse {
		return op.Off+op.N < size
	}
	return op.Off < size && size+op.N <= w.sh.maxFileBytes
}

// step generates and runs one op.
func (w *worker) step() error {
	w.mu.Lock()
	op := w.gen()
	w.mu.Unlock()
	return w.run(op)
}

// run runs op and applies it to the model. An error is a bug of the engine
// (every generated op is valid).
func (w *worker) run(op Op) error {
	w.started.Add(1)
	defer w.done.Add(1)
	w.log = append(w.log, op)
	err := w.exec(&w.log[len(w.log)-1])
	w.mu.Lock()
	w.m.ops++
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("op %d %v: %w", len(w.log), op, err)
	}
	return nil
}

// slot returns handle h, or nil if the slot is empty (skipped op).
func (w *worker) slot(h int) *handle {
	if h < 0 || h >= len(w.handles) {
		return nil
	}
	return w.handles[h]
}

func (w *worker) exec(op *Op) error {
	fs := w.sh.fs
	m := w.m
	switch op.Kind {
	case OpCreate, OpOpen:
		if op.H >= len(w.handles) {
			w.handles = append(w.handles, make([]*handle, op.H+1-len(w.handles))...)
		}
		if w.handles[op.H] != nil {
			return nil
		}
		var fm *fileModel
		e, exists := m.ns[op.Path]
		flags := sluice.O_RDWR | op.Flags
		if op.Kind == OpCreate {
			if exists || !m.ns.hasDir(path.Dir(op.Path), w.root) {
				return nil
			}
			flags |= sluice.O_CREAT | sluice.O_EXCL
		} else {
			if !exists || e.dir {
				return nil
			}
			fm = m.byIno[e.ino]
		}
		f, err := fs.OpenFile(op.Path, flags, 0o644)
		if err != nil {
			return err
		}
		w.mu.Lock()
		if fm == nil {
			fm = newFileModel(w.rng.Uint64()|1, f.Ino())
			m.addFile(fm)
			ns := m.editNS()
			ns[op.Path] = nsEntry{ino: fm.ino}
			m.setNS(ns)
		} else if op.Flags&sluice.O_TRUNC != 0 {
			fm.setSize(0)
		}
		fm.opens++
		w.mu.Unlock()
		w.handles[op.H] = &handle{f: f, fm: fm, direct: op.Flags&sluice.O_DIRECT != 0, dsync: op.Flags&(sluice.O_DSYNC|sluice.O_SYNC) != 0,
			sync: op.Flags&sluice.O_SYNC == sluice.O_SYNC, append: op.Flags&sluice.O_APPEND != 0}
		if f.Ino() != fm.ino {
			return fmt.Errorf("opened inode %d, the model says %d", f.Ino(), fm.ino)
		}
		return nil
	case OpClose:
		h := w.slot(op.H)
		if h == nil {
			return nil
		}
		w.handles[op.H] = nil
		w.mu.Lock()
		h.fm.opens--
		w.mu.Unlock()
		return h.f.Close()
	case OpWrite:
		h := w.slot(op.H)
		if h == nil {
			return nil
		}
		seq := w.sh.seq.Add(1)
		op.Seq = seq
		off := op.Off
		if h.append || op.Flags&int(sluice.RWFAppend) != 0 {
			off = h.fm.size // the file is this worker's: nobody else moves EOF
		}
		buf := device.AlignedBuf(int(op.N))
		for i := int64(0); i < op.N; i += SectorSize {
			fillSector(buf[i:i+SectorSize], Tag{File: h.fm.id, Seq: seq, Off: off + i})
		}
		n, err := h.f.Pwrite(buf, op.Off, sluice.RWFlags(op.Flags))
		if err != nil {
			return err
		}
		if n != len(buf) {
			return fmt.Errorf("short write: %d of %d bytes", n, len(buf))
		}
		w.mu.Lock()
		if !h.direct && off+op.N > h.fm.size {
			// A buffered write publishes its size page by page as it
			// copies; a sync point that runs meanwhile (another worker's)
			// persists whichever it finds.
			ps := min(w.sh.blockSize, 4096)
			for b := (max(off, h.fm.size)/ps + 1) * ps; b < off+op.N; b += ps {
				h.fm.setSize(b)
			}
		}
		h.fm.write(off, op.N, seq, h.direct)
		if h.dsync || op.Flags&int(sluice.RWFDsync) != 0 {
			h.fm.collapseRange(off, op.N)
			m.dataSync(h)
		}
		w.mu.Unlock()
		return nil
	case OpFsync:
		h := w.slot(op.H)
		if h == nil {
			return nil
		}
		var err error
		if op.Flags == 1 {
			err = h.f.Fdatasync()
		} else {
			err = h.f.Fsync()
		}
		if err != nil {
			return err
		}
		w.mu.Lock()
		h.fm.collapse()
		if op.Flags == 1 {
			m.fileSync(h.fm)
		} else {
			m.syncPoint()
		}
		w.mu.Unlock()
		return nil
	case OpFsyncDir:
		if op.Path != w.root && !m.ns.hasDir(op.Path, w.root) {
			return nil
		}
		f, err := fs.OpenFile(op.Path, sluice.O_RDONLY|sluice.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		err = f.Fsync()
		f.Close()
		if err != nil {
			return err
		}
		w.mu.Lock()
		m.syncPoint()
		w.mu.Unlock()
		return nil
	case OpSyncAll:
		if err := fs.SyncAll(); err != nil {
			return err
		}
		w.mu.Lock()
		m.syncAll()
		w.mu.Unlock()
		return nil
	case OpFallocate:
		h := w.slot(op.H)
		if h == nil {
			return nil
		}
		if err := h.f.Fallocate(uint32(op.Flags), op.Off, op.N); err != nil {
			return err
		}
		w.mu.Lock()
		fm := h.fm
		if op.Flags&(sluice.FallocPunchHole|sluice.FallocZeroRange) != 0 {
			fm.zero(op.Off, op.N)
		}
		if op.Flags&sluice.FallocKeepSize == 0 && op.Off+op.N > fm.size {
			fm.setSize(op.Off + op.N)
		}
		w.mu.Unlock()
		return nil
	case OpTruncate:
		var fm *fileModel
		var err error
		if op.H >= 0 {
			h := w.slot(op.H)
			if h == nil {
				return nil
			}
			fm = h.fm
			err = h.f.Truncate(op.Off)
		} else {
			e, ok := m.ns[op.Path]
			if !ok || e.dir {
				return nil
			}
			fm = m.byIno[e.ino]
			err = fs.Truncate(op.Path, op.Off)
		}
		if err != nil {
			return err
		}
		w.mu.Lock()
		fm.setSize(op.Off)
		w.mu.Unlock()
		return nil
	case OpRename:
		src, ok := m.ns[op.Path]
		if !ok {
			return nil
		}
		dst, dstOK := m.ns[op.Path2]
		if !m.ns.hasDir(path.Dir(op.Path2), w.root) || (src.dir && (dstOK || strings.HasPrefix(op.Path2, op.Path+"/"))) || (dstOK && dst.dir) {
			return nil
		}
		if err := fs.Rename(op.Path, op.Path2, 0); err != nil {
			return err
		}
		if dstOK && dst.ino == src.ino {
			return nil // two names of one file: rename does nothing
		}
		w.mu.Lock()
		ns := m.editNS()
		if dstOK {
			m.byIno[dst.ino].nlink--
		}
		delete(ns, op.Path)
		ns[op.Path2] = src
		if src.dir {
			for p, e := range m.ns {
				if strings.HasPrefix(p, op.Path+"/") {
					delete(ns, p)
					ns[op.Path2+p[len(op.Path):]] = e
				}
			}
		}
		m.setNS(ns)
		w.mu.Unlock()
		return nil
	case OpLink:
		src, ok := m.ns[op.Path]
		if _, exists := m.ns[op.Path2]; !ok || src.dir || exists || !m.ns.hasDir(path.Dir(op.Path2), w.root) {
			return nil
		}
		if err := fs.Link(op.Path, op.Path2); err != nil {
			return err
		}
		w.mu.Lock()
		ns := m.editNS()
		ns[op.Path2] = src
		m.byIno[src.ino].nlink++
		m.setNS(ns)
		w.mu.Unlock()
		return nil
	case OpUnlink:
		e, ok := m.ns[op.Path]
		if !ok || e.dir {
			return nil
		}
		if err := fs.Unlink(op.Path); err != nil {
			return err
		}
		w.mu.Lock()
		ns := m.editNS()
		delete(ns, op.Path)
		m.byIno[e.ino].nlink--
		m.setNS(ns)
		w.mu.Unlock()
		return nil
	case OpMkdir:
		if _, exists := m.ns[op.Path]; exists || !m.ns.hasDir(path.Dir(op.Path), w.root) {
			return nil
		}
		if err := fs.Mkdir(op.Path, 0o755); err != nil {
			return err
		}
		a, err := fs.Stat(op.Path)
		if err != nil {
			return err
		}
		w.mu.Lock()
		ns := m.editNS()
		ns[op.Path] = nsEntry{ino: a.Ino, dir: true}
		m.setNS(ns)
		w.mu.Unlock()
		return nil
	case OpRmdir:
		e, ok := m.ns[op.Path]
		if !ok || !e.dir {
			return nil
		}
		for p := range m.ns {
			if strings.HasPrefix(p, op.Path+"/") {
				return nil
			}
		}
		if err := fs.Rmdir(op.Path); err != nil {
			return err
		}
		w.mu.Lock()
		ns := m.editNS()
		delete(ns, op.Path)
		m.setNS(ns)
		w.mu.Unlock()
		return nil
	case OpRead:
		h := w.slot(op.H)
		if h == nil {
			return nil
		}
		return w.readCompare(h, op.Off, op.N)
	case OpWriteParallel:
		h := w.slot(op.H)
		if h == nil || !h.direct || h.append {
			return nil
		}
		seqs := make([]uint64, len(op.Ranges))
		errs := make([]error, len(op.Ranges))
		var wg sync.WaitGroup
		for i, r := range op.Ranges {
			seqs[i] = w.sh.seq.Add(1)
			if i == 0 {
				op.Seq = seqs[i]
			}
			buf := device.AlignedBuf(int(r[1]))
			for o := int64(0); o < r[1]; o += SectorSize {
				fillSector(buf[o:o+SectorSize], Tag{File: h.fm.id, Seq: seqs[i], Off: r[0] + o})
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := h.f.Pwrite(buf, r[0], sluice.RWFlags(op.Flags))
				if err == nil && n != len(buf) {
					err = fmt.Errorf("short write: %d of %d bytes", n, len(buf))
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		w.mu.Lock()
		// Each write publishes its own end at its completion, so a crash
		// may find the size of any subset of them: every end is a size
		// the file had.
		ends := make([]int64, 0, len(op.Ranges))
		for _, r := range op.Ranges {
			ends = append(ends, r[0]+r[1])
		}
		slices.Sort(ends)
		for _, e := range ends {
			if e > h.fm.size {
				h.fm.setSize(e)
			}
		}
		for i, r := range op.Ranges {
			h.fm.write(r[0], r[1], seqs[i], true)
		}
		if h.dsync {
			for _, r := range op.Ranges {
				h.fm.collapseRange(r[0], r[1])
			}
			m.dataSync(h)
		}
		w.mu.Unlock()
		return nil
	case OpClone:
		h, s := w.slot(op.H), w.slot(op.H2)
		if h == nil || s == nil || h.append {
			return nil
		}
		count, bcount, ok := w.cloneExtent(h.fm, s.fm, *op)
		if !ok {
			return nil
		}
		var err error
		if op.Flags == 1 {
			err = h.f.Clone(s.f)
		} else {
			err = h.f.CloneRange(s.f, op.Off2, op.Off, op.N)
		}
		if err != nil {
			return err
		}
		w.mu.Lock()
		if op.Flags == 1 {
			h.fm.clone(s.fm, 0, 0, count, bcount)
		} else {
			h.fm.clone(s.fm, op.Off2, op.Off, count, bcount)
		}
		w.mu.Unlock()
		return nil
	case OpCollapse, OpInsert:
		if !w.shiftValid(*op) {
			return nil
		}
		h := w.slot(op.H)
		mode := uint32(sluice.FallocInsertRange)
		if op.Kind == OpCollapse {
			mode = sluice.FallocCollapseRange
		}
		if err := h.f.Fallocate(mode, op.Off, op.N); err != nil {
			return err
		}
		w.mu.Lock()
		h.fm.shift(op.Kind == OpCollapse, op.Off, op.N, w.sh.blockSize)
		w.mu.Unlock()
		return nil
	}
	return fmt.Errorf("unknown op %d", op.Kind)
}

// readCompare reads [off, off+n) through h and compares it, and the size,
// with the model's current state.
func (w *worker) readCompare(h *handle, off, n int64) error {
	a, err := h.f.Stat()
	if err != nil {
		return err
	}
	if a.Size != h.fm.size {
		return fmt.Errorf("live: Stat says size %d, the model %d", a.Size, h.fm.size)
	}
	buf := device.AlignedBuf(int(n))
	got, err := h.f.Pread(buf, off, 0)
	if err != nil {
		return err
	}
	want := max(0, min(n, h.fm.size-off))
	if int64(got) != want {
		return fmt.Errorf("live: read %d bytes at %d, want %d (size %d)", got, off, want, h.fm.size)
	}
	var exp [SectorSize]byte
	for i := int64(0); i < want; i += SectorSize {
		o := off + i
		v := h.fm.cur(o / SectorSize)
		if v == (Tag{}) {
			clear(exp[:])
		} else {
			fillSector(exp[:], v)
		}
		if !bytes.Equal(buf[i:i+SectorSize], exp[:]) {
			kind, tag := decodeSector(buf[i : i+SectorSize])
			return fmt.Errorf("live: sector at %d reads %s, want %s", o, describeSector(kind, tag), describeValue(v))
		}
	}
	return nil
}

// hasDir reports whether p is the root or a directory of ns.
func (ns namespace) hasDir(p, root string) bool {
	if p == root {
		return true
	}
	e, ok := ns[p]
	return ok && e.dir
}

func describeSector(k SectorKind, t Tag) string {
	switch k {
	case Zero:
		return "zeros"
	case Garbage:
		return "garbage"
	}
	return "write " + itoa(t.Seq) + " of file " + fmt.Sprintf("%#x", t.File) + " at offset " + itoa(uint64(t.Off))
}

func describeValue(v Tag) string {
	if v == (Tag{}) {
		return "zeros"
	}
	return describeSector(Tagged, v)
}
