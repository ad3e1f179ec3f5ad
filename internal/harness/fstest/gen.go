package fstest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"syscall"
)

// GenConfig shapes the random operation sequences of Generate.
type GenConfig struct {
	// Ops is the number of operations. The default value is 200.
	Ops int
	// MaxFileBytes bounds the offsets the operations choose (a write or
	// fallocate may end up to MaxIOBytes beyond). The default value is
	// 96 KiB.
	MaxFileBytes int64
	// MaxIOBytes bounds the length of one read or write (twice that for
	// a fallocate). The default value is 20 KiB.
	MaxIOBytes int64
	// BlockSize is the engine's block size, which aligned choices use. The
	// default value is 4096.
	BlockSize int64
	// DirectAlign is the alignment O_DIRECT needs (the device's I/O unit).
	// The default value is 512.
	DirectAlign int64
	// Slots is the number of handle slots. The default value is 6.
	Slots int
	// LargeIOPct is the share, in percent, of reads and writes whose
	// length is drawn up to MaxIOBytes (the others are under 12 KiB). The
	// default value is 20.
	LargeIOPct int
	// ReflinkPerMille is the share, in thousandths, of operations that
	// are reflink calls (FICLONE, FICLONERANGE, FIDEDUPERANGE,
	// XFS_IOC_EXCHANGE_RANGE without FILE1_WRITTEN) or the fallocate
	// modes that move or unshare blocks (COLLAPSE_RANGE, INSERT_RANGE,
	// UNSHARE_RANGE). The default value is 0: none, and a seed gives the
	// sequence it gave before these calls were generated.
	ReflinkPerMille int
	// AtomicPct is the share, in percent, of positioned writes that are
	// untorn (OpPwriteAtomic, RWF_ATOMIC) when a handle open O_DIRECT
	// without O_APPEND is there to take them (one in ten goes to a
	// buffered handle: EOPNOTSUPP). Most follow the rules (a power of two
	// from the model's AtomicUnitMin, at an offset aligned to it, within
	// the file, at its EOF or past it), so that they overwrite, fill holes
	// and extend files the other operations write, truncate and punch;
	// one in eight breaks one (EINVAL). The default value is 0: none, and
	// a seed gives the sequence it gave before atomic writes were
	// generated.
	AtomicPct int
	// Skip, if set, is asked about every candidate operation with the model
	// in the state the operation would see; a non-empty answer (the ID of a
	// known engine bug it would trigger) drops the candidate, and Generate
	// counts the drops per ID.
	Skip func(g *Generator, op Op) string
}

func (c *GenConfig) ensureDefaults() {
	if c.Ops == 0 {
		c.Ops = 200
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = 96 << 10
	}
	if c.MaxIOBytes == 0 {
		c.MaxIOBytes = 20 << 10
	}
	if c.BlockSize == 0 {
		c.BlockSize = 4096
	}
	if c.DirectAlign == 0 {
		c.DirectAlign = 512
	}
	if c.Slots == 0 {
		c.Slots = 6
	}
	if c.LargeIOPct == 0 {
		c.LargeIOPct = 20
	}
}

// Step is one generated operation and the model's result for it.
type Step struct {
	Op     Op
	Result Result
}

// Generator makes a seeded random sequence of operations, choosing each
// one with the model's current state in view (which names exist, which
// handles are open, how long files are) so that most operations do
// something and some fail on purpose. The same seed and config always give
// the same sequence.
type Generator struct {
	cfg   GenConfig
	rng   *rand.Rand
	Model *Model
	run   *Runner
	// Skipped counts the candidates dropped by cfg.Skip, per answer.
	Skipped map[string]int
	// unsynced holds the files written since their last fsync,
	// fdatasync or remount (Unsynced).
	unsynced map[*mnode]bool
}

// Unsynced reports whether the file open in slot may have dirty pages: it
// was written (buffered), truncated or fallocated since its last fsync,
// fdatasync or remount.
func (g *Generator) Unsynced(slot int) bool {
	h := g.slot(slot)
	return h != nil && g.unsynced[h.n]
}

// noteSync keeps unsynced up to date after op gave res.
func (g *Generator) noteSync(op Op, res Result) {
	if res.Errno != 0 {
		return
	}
	h := g.slot(op.Slot)
	switch op.Kind {
	case OpPwrite, OpWrite, OpPwriteAtomic:
		if h != nil && h.flags&syscall.O_DIRECT == 0 && res.N > 0 {
			g.unsynced[h.n] = true
		}
	case OpFtruncate, OpFallocate:
		if h != nil {
			g.unsynced[h.n] = true
		}
	case OpTruncate:
		if n, err := g.Model.lookup(op.Path); err == nil {
			g.unsynced[n] = true
		}
	case OpFsync, OpFdatasync:
		if h != nil {
			delete(g.unsynced, h.n)
		}
	case OpRemount:
		clear(g.unsynced)
	}
}

// names are the components of generated paths: at most three levels of
// them, so that names collide often.
var names = []string{"a", "b", "c"}

// Generate returns the sequence for seed and the model's result for each
// step.
func Generate(seed uint64, cfg GenConfig) ([]Step, *Generator) {
	cfg.ensureDefaults()
	m := NewModel(cfg.DirectAlign, cfg.BlockSize)
	g := &Generator{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(seed, 0x5eed)),
		Model:    m,
		run:      NewRunner(m),
		Skipped:  map[string]int{},
		unsynced: map[*mnode]bool{},
	}
	var steps []Step
	for tries := 0; len(steps) < cfg.Ops && tries < 100*cfg.Ops; tries++ {
		op := g.next()
		if cfg.Skip != nil {
			if id := cfg.Skip(g, op); id != "" {
				g.Skipped[id]++
				continue
			}
		}
		res := g.run.Apply(op)
		g.noteSync(op, res)
		steps = append(steps, Step{op, res})
	}
	return steps, g
}

// entry is a name that exists in the model.
type entry struct {
	path string
	n    *mnode
}

// entries lists every name below the root, depth first in name order.
func (g *Generator) entries() []entry {
	var out []entry
	var walk func(dir string, n *mnode)
	walk = func(dir string, n *mnode) {
		ks := make([]string, 0, len(n.kids))
		for k := range n.kids {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			c := n.kids[k]
			out = append(out, entry{dir + k, c})
			if c.isDir() {
				walk(dir+k+"/", c)
			}
		}
	}
	walk("/", g.Model.root)
	return out
}

// slot returns the model handle in slot i, or nil if it was never opened.
func (g *Generator) slot(i int) *modelHandle {
	h, _ := g.run.Handle(i).(*modelHandle)
	return h
}

func (g *Generator) intn(n int) int { return g.rng.IntN(n) }

func (g *Generator) chance(pct int) bool { return g.rng.IntN(100) < pct }

// pickPath returns an existing name that satisfies want (often), or a
// random path (sometimes, and when none exists).
func (g *Generator) pickPath(want func(*mnode) bool) string {
	if g.chance(80) {
		var c []entry
		for _, e := range g.entries() {
			if want == nil || want(e.n) {
				c = append(c, e)
			}
		}
		if len(c) > 0 {
			return c[g.intn(len(c))].path
		}
	}
	return g.newPath()
}

// newPath returns a random path: mostly a random name in an existing
// directory, otherwise up to three random components.
func (g *Generator) newPath() string {
	if g.chance(70) {
		dirs := []string{""}
		for _, e := range g.entries() {
			if e.n.isDir() {
				dirs = append(dirs, e.path)
			}
		}
		return dirs[g.intn(len(dirs))] + "/" + names[g.intn(len(names))]
	}
	p := ""
	for range 1 + g.intn(3) {
		p += "/" + names[g.intn(len(names))]
	}
	return p
}

func isFile(n *mnode) bool { return n.isReg() }
func isDir(n *mnode) bool  { return n.isDir() }

// openSlot returns an open slot (any, or one whose handle satisfies want),
// or a random slot (which may be closed or never opened).
func (g *Generator) openSlot(want func(h *modelHandle) bool) int {
	if g.chance(92) {
		var c []int
		for i := range g.cfg.Slots {
			if h := g.slot(i); h != nil && !h.closed && (want == nil || want(h)) {
				c = append(c, i)
			}
		}
		if len(c) > 0 {
			return c[g.intn(len(c))]
		}
	}
	return g.intn(g.cfg.Slots)
}

// freeSlot returns a slot with no open handle, or -1.
func (g *Generator) freeSlot() int {
	var c []int
	for i := range g.cfg.Slots {
		if h := g.slot(i); h == nil || h.closed {
			c = append(c, i)
		}
	}
	if len(c) == 0 {
		return -1
	}
	return c[g.intn(len(c))]
}

func (g *Generator) fileSize(slot int) int64 {
	if h := g.slot(slot); h != nil && h.n.isReg() {
		return int64(len(h.n.data))
	}
	return 0
}

func (g *Generator) isDirect(slot int) bool {
	h := g.slot(slot)
	return h != nil && h.flags&syscall.O_DIRECT != 0
}

// offset picks a file offset: anywhere, near EOF, block-aligned or at EOF.
func (g *Generator) offset(size int64) int64 {
	bs := g.cfg.BlockSize
	var off int64
	switch g.intn(5) {
	case 0, 1:
		off = g.rng.Int64N(g.cfg.MaxFileBytes)
	case 2:
		off = size + g.rng.Int64N(2*bs) - bs
	case 3:
		off = g.rng.Int64N(g.cfg.MaxFileBytes/bs+1) * bs
	case 4:
		off = size
	}
	return max(off, 0)
}

// length picks an I/O length: empty, small, a few pages, or large.
func (g *Generator) length() int64 {
	if g.chance(g.cfg.LargeIOPct) {
		return 1 + g.rng.Int64N(g.cfg.MaxIOBytes)
	}
	switch r := g.intn(100); {
	case r < 5:
		return 0
	case r < 60:
		return 1 + g.rng.Int64N(600)
	default:
		return 1 + g.rng.Int64N(3*4096)
	}
}

// alignIO makes off and n O_DIRECT-aligned (n at least one unit), and
// sometimes misaligns the offset of a write on purpose (EINVAL). Never the
// length: Linux checks the alignment of each mapped piece as it goes, so
// on ext4 a write whose length alone is misaligned can write its first
// pieces and still fail with EINVAL.
func (g *Generator) alignIO(off, n int64, write bool) (int64, int64) {
	a := g.cfg.DirectAlign
	off = off / a * a
	n = max((n+a-1)/a*a, a)
	if n > g.cfg.MaxIOBytes {
		n = max(g.cfg.MaxIOBytes/a*a, a)
	}
	if write && g.chance(5) {
		off += 1 + g.rng.Int64N(a-1)
	}
	return off, n
}

// next returns a candidate operation.
func (g *Generator) next() Op {
	if g.cfg.ReflinkPerMille > 0 && g.intn(1000) < g.cfg.ReflinkPerMille {
		return g.genReflink()
	}
	seed := byte(1 + g.intn(255))
	switch r := g.intn(1000); {
	case r < 110:
		return g.genOpen()
	case r < 160:
		return Op{Kind: OpClose, Slot: g.openSlot(nil)}
	case r < 340:
		if g.cfg.AtomicPct > 0 && g.chance(g.cfg.AtomicPct) {
			if op, ok := g.genAtomicWrite(seed); ok {
				return op
			}
		}
		s := g.openSlot(func(h *modelHandle) bool { return h.writable() })
		off, n := g.offset(g.fileSize(s)), g.length()
		if g.isDirect(s) {
			off, n = g.alignIO(off, n, true)
		}
		if g.chance(2) {
			off = -1 - g.rng.Int64N(4096)
		}
		return Op{Kind: OpPwrite, Slot: s, Off: off, Len: n, Seed: seed}
	case r < 480:
		s := g.openSlot(func(h *modelHandle) bool { return h.readable() })
		off, n := g.offset(g.fileSize(s)), g.length()
		if g.isDirect(s) {
			off, n = g.alignIO(off, n, false)
		}
		if g.chance(2) {
			off = -1 - g.rng.Int64N(4096)
		}
		return Op{Kind: OpPread, Slot: s, Off: off, Len: n}
	case r < 540:
		s := g.openSlot(func(h *modelHandle) bool { return h.writable() })
		n := g.length()
		if g.isDirect(s) {
			_, n = g.alignIO(0, n, true)
		}
		return Op{Kind: OpWrite, Slot: s, Len: n, Seed: seed}
	case r < 590:
		s := g.openSlot(func(h *modelHandle) bool { return h.readable() })
		n := g.length()
		if g.isDirect(s) {
			if a := g.cfg.DirectAlign; g.slot(s).pos%a != 0 {
				// A misaligned O_DIRECT read succeeds on Linux over a
				// hole, which the model cannot tell: realign instead.
				return Op{Kind: OpSeek, Slot: s, Off: g.slot(s).pos / a * a}
			}
			_, n = g.alignIO(0, n, false)
		}
		return Op{Kind: OpRead, Slot: s, Len: n}
	case r < 630:
		s := g.openSlot(func(h *modelHandle) bool { return h.n.isReg() })
		if h := g.slot(s); h != nil && !h.closed && h.n.isDir() {
			// Directory offsets are the file system's cookies (ext4:
			// htree hashes): not comparable.
			return Op{Kind: OpFstat, Slot: s}
		}
		whence := g.intn(3)
		off := g.offset(g.fileSize(s))
		switch whence {
		case 1:
			off = g.rng.Int64N(8192) - 4096
		case 2:
			off = g.rng.Int64N(8192) - 4096
		}
		if g.isDirect(s) {
			off = off / g.cfg.DirectAlign * g.cfg.DirectAlign
		}
		return Op{Kind: OpSeek, Slot: s, Off: off, Flags: whence}
	case r < 670:
		s := g.openSlot(func(h *modelHandle) bool { return h.writable() })
		size := g.offset(g.fileSize(s))
		if g.chance(3) {
			size = -1
		}
		return Op{Kind: OpFtruncate, Slot: s, Off: size}
	case r < 690:
		size := g.offset(0)
		if g.chance(3) {
			size = -1
		}
		return Op{Kind: OpTruncate, Path: g.pickPath(isFile), Off: size}
	case r < 750:
		s := g.openSlot(func(h *modelHandle) bool { return h.writable() })
		modes := []int{0, 0x01, 0x03, 0x03, 0x10, 0x11}
		mode := modes[g.intn(len(modes))]
		off, n := g.offset(g.fileSize(s)), 1+g.rng.Int64N(2*g.cfg.MaxIOBytes)
		switch {
		case g.chance(3):
			mode = 0x02 // PUNCH_HOLE without KEEP_SIZE: EOPNOTSUPP
		case g.chance(3):
			n = 0 // EINVAL
		case g.chance(30):
			bs := g.cfg.BlockSize
			off, n = off/bs*bs, max(n/bs*bs, bs)
		}
		return Op{Kind: OpFallocate, Slot: s, Flags: mode, Off: off, Len: n}
	case r < 770:
		return Op{Kind: OpFsync, Slot: g.openSlot(nil)}
	case r < 780:
		return Op{Kind: OpFdatasync, Slot: g.openSlot(nil)}
	case r < 810:
		return Op{Kind: OpFstat, Slot: g.openSlot(nil)}
	case r < 840:
		return Op{Kind: OpStat, Path: g.pickPath(nil)}
	case r < 860:
		return Op{Kind: OpReadDir, Path: g.pickPath(isDir)}
	case r < 865:
		return Op{Kind: OpFreadDir, Slot: g.openSlot(func(h *modelHandle) bool { return h.n.isDir() })}
	case r < 905:
		flags := 0
		if g.chance(10) {
			flags = 1 + g.intn(2) // RENAME_NOREPLACE or RENAME_EXCHANGE
		}
		var dst string
		if g.chance(50) {
			dst = g.pickPath(nil)
		} else {
			dst = g.newPath()
		}
		return Op{Kind: OpRename, Path: g.pickPath(nil), Path2: dst, Flags: flags}
	case r < 925:
		return Op{Kind: OpLink, Path: g.pickPath(isFile), Path2: g.newPath()}
	case r < 955:
		return Op{Kind: OpUnlink, Path: g.pickPath(isFile)}
	case r < 975:
		return Op{Kind: OpMkdir, Path: g.newPath(), Perm: 0o755}
	case r < 990:
		return Op{Kind: OpRmdir, Path: g.pickPath(isDir)}
	case r < 997:
		// No set-user-ID or set-group-ID: whether a write clears them
		// depends on the writer's privileges (CAP_FSETID), which the
		// engine does not model.
		perms := []uint32{0o644, 0o600, 0o755, 0o700, 0o1777}
		return Op{Kind: OpChmod, Path: g.pickPath(nil), Perm: perms[g.intn(len(perms))]}
	default:
		return Op{Kind: OpRemount}
	}
}

// genAtomicWrite returns an untorn write (OpPwriteAtomic) with the bytes
// of seed, on a handle open O_DIRECT (one in ten times any handle:
// EOPNOTSUPP for a buffered one), never on one open O_APPEND (sluice
// refuses those with EINVAL where XFS, the host, appends). Its length is
// a power of two from the model's AtomicUnitMin, doubled while it stays
// within MaxIOBytes half of the time, now and then AtomicUnitMax; its
// offset a multiple of the length within the file or the unit just past
// its EOF, sometimes anywhere below MaxFileBytes (past EOF: a hole
// between). One in eight breaks a rule: a length under the smallest
// unit, over the largest or not a power of two, or an offset not aligned
// to the length (all EINVAL). Never a zero length: sluice answers EINVAL
// where Linux writes nothing (an engine bug, TestAtomicZeroLength). Now
// and then the slot is any (EBADF if it is closed, never opened or
// read-only). false if no handle fits.
func (g *Generator) genAtomicWrite(seed byte) (Op, bool) {
	want := func(h *modelHandle) bool {
		return h.writable() && h.n.isReg() && h.flags&(syscall.O_DIRECT|syscall.O_APPEND) == syscall.O_DIRECT
	}
	if g.chance(10) {
		want = func(h *modelHandle) bool { return h.writable() && h.n.isReg() && h.flags&syscall.O_APPEND == 0 }
	}
	var c []int
	for i := range g.cfg.Slots {
		if h := g.slot(i); h != nil && !h.closed && want(h) {
			c = append(c, i)
		}
	}
	var s int
	switch {
	case g.chance(4):
		// Any slot: EBADF for one closed, never opened or read-only.
		s = g.intn(g.cfg.Slots)
		if h := g.slot(s); h != nil && !h.closed && h.flags&syscall.O_APPEND != 0 {
			return Op{}, false
		}
	case len(c) == 0:
		return Op{}, false
	default:
		s = c[g.intn(len(c))]
	}
	lo, hi := g.Model.AtomicUnitMin, g.Model.AtomicUnitMax
	n := lo
	for n < hi && 2*n <= g.cfg.MaxIOBytes && g.chance(50) {
		n *= 2
	}
	if g.chance(3) {
		n = hi
	}
	size := g.fileSize(s)
	var off int64
	if g.chance(80) {
		off = g.rng.Int64N((size+n-1)/n+1) * n
	} else {
		off = g.rng.Int64N(g.cfg.MaxFileBytes/n+1) * n
	}
	if g.chance(12) {
		switch g.intn(4) {
		case 0:
			n = lo / 2
		case 1:
			n = 2 * hi
		case 2:
			n = 3 * lo
		default:
			off += n / 2
		}
	}
	return Op{Kind: OpPwriteAtomic, Slot: s, Off: off, Len: n, Seed: seed}, true
}

// genReflink returns a reflink call or a fallocate that moves or unshares
// blocks. Arguments mostly follow the rules (block-aligned offsets within
// EOF, lengths of whole blocks or up to EOF), so that most calls share,
// swap or move something, and sometimes break one. The second file is
// often the first one (through the same or another handle): a clone or
// exchange within one file. With no handle fit for the call, it opens
// one instead.
func (g *Generator) genReflink() Op {
	bs := g.cfg.BlockSize
	reg := func(h *modelHandle) bool { return h.n.isReg() }
	writable := func(h *modelHandle) bool { return h.writable() && h.n.isReg() && h.flags&syscall.O_APPEND == 0 }
	readable := func(h *modelHandle) bool { return h.readable() && h.n.isReg() }
	rdwr := func(h *modelHandle) bool {
		return h.flags&syscall.O_ACCMODE == syscall.O_RDWR && h.flags&syscall.O_APPEND == 0 && h.n.isReg()
	}
	switch r := g.intn(100); {
	case r < 35:
		dst, ok := g.reflinkSlot(writable)
		if !ok {
			return g.openForReflink()
		}
		src := g.partnerSlot(dst, readable)
		srcSize, dsize := g.fileSize(src), g.fileSize(dst)
		srcOff := g.remapOff(srcSize)
		if g.chance(80) {
			srcOff = min(srcOff, max(srcSize-1, 0)/bs*bs) // within EOF
		}
		n := g.remapLen(srcOff, srcSize)
		dstOff := g.remapOff(dsize)
		blen := n
		if n == 0 || srcOff+n == srcSize {
			blen = roundUpTo(srcSize-srcOff, bs)
		}
		switch {
		case g.chance(10):
			dstOff = roundUpTo(dsize, bs) + g.rng.Int64N(3)*bs // past EOF
		case g.slot(src) != nil && g.slot(dst) != nil && g.slot(src).n == g.slot(dst).n && g.chance(70):
			// Within one file: clear of the source range.
			if g.chance(50) && srcOff >= blen {
				dstOff = g.rng.Int64N(srcOff/bs-blen/bs+1) * bs
			} else {
				dstOff = srcOff + blen + g.rng.Int64N(3)*bs
			}
		case blen%bs != 0 || srcOff+blen > srcSize:
			// A range ending in a partial block must end at or past
			// the destination's EOF.
			if g.chance(70) {
				dstOff = max(dstOff, roundUpTo(max(dsize-(srcSize-srcOff), 0), bs))
			}
		}
		return Op{Kind: OpCloneRange, Slot: dst, Off: dstOff, Slot2: src, Off2: srcOff, Len: n}
	case r < 40:
		dst, ok := g.reflinkSlot(writable)
		if !ok {
			return g.openForReflink()
		}
		return Op{Kind: OpClone, Slot: dst, Slot2: g.partnerSlot(dst, readable)}
	case r < 60:
		src, ok := g.reflinkSlot(readable)
		if !ok {
			return g.openForReflink()
		}
		dst := g.partnerSlot(src, reg)
		srcSize := g.fileSize(src)
		srcOff := min(g.remapOff(srcSize), srcSize/bs*bs)
		n := g.remapLen(srcOff, srcSize)
		dstOff := g.remapOff(g.fileSize(dst))
		if dsize := g.fileSize(dst); n > 0 && n <= dsize && g.chance(80) {
			dstOff = min(dstOff, (dsize-n)/bs*bs) // within EOF
		}
		if offs := g.equalRanges(src, srcOff, n, dst); len(offs) > 0 && g.chance(70) {
			dstOff = offs[g.intn(len(offs))]
		}
		return Op{Kind: OpDedupeRange, Slot: src, Off: srcOff, Slot2: dst, Off2: dstOff, Len: n}
	case r < 75:
		file2, ok := g.reflinkSlot(rdwr)
		if !ok {
			return g.openForReflink()
		}
		var flags int
		if g.chance(25) {
			flags |= ExchangeToEOF
		}
		file1 := g.partnerSlot(file2, rdwr)
		if h2 := g.slot(file2); h2 != nil && flags&ExchangeToEOF != 0 && g.chance(90) {
			// Within one file the ranges to EOF overlap.
			if s, ok := g.reflinkSlot(func(h *modelHandle) bool { return rdwr(h) && h.n != h2.n }); ok {
				file1 = s
			}
		}
		size1, size2 := g.fileSize(file1), g.fileSize(file2)
		off1, off2 := min(g.remapOff(size1), size1/bs*bs), min(g.remapOff(size2), size2/bs*bs)
		if flags&ExchangeToEOF != 0 && g.chance(70) {
			// The same offset in both, which leaves no data past
			// either file's new EOF: XFS, the host oracle, can show
			// such data (metaHost).
			off1 = min(off1, size1/bs*bs, size2/bs*bs)
			off2 = off1
		}
		var n int64
		switch rest := min(size1-off1, size2-off2); {
		case size1-off1 == size2-off2 && g.chance(30):
			n = rest // to both EOFs, a partial block allowed
		case rest >= bs && g.chance(90):
			n = (1 + g.rng.Int64N(rest/bs)) * bs
		default:
			n = g.remapLen(off1, size1)
		}
		if g.chance(8) {
			flags |= ExchangeDryRun
		}
		if g.chance(5) {
			flags |= ExchangeDsync
		}
		return Op{Kind: OpExchangeRange, Slot: file2, Off: off2, Slot2: file1, Off2: off1, Len: n, Flags: flags}
	case r < 91:
		s, ok := g.reflinkSlot(writable)
		if !ok {
			return g.openForReflink()
		}
		size := g.fileSize(s)
		mode := 0x08 // COLLAPSE_RANGE
		if r >= 83 {
			mode = 0x20 // INSERT_RANGE
		}
		off := min(g.remapOff(size), max(size-1, 0)/bs*bs)
		n := (1 + g.rng.Int64N(3)) * bs
		switch {
		case g.chance(5):
			n = 1 + g.rng.Int64N(2*bs) // misaligned: EINVAL
		case g.chance(5):
			off = g.remapOff(size) // at or past EOF: EINVAL
		case mode == 0x20 && size > g.cfg.MaxFileBytes:
			mode = 0x08 // keep files from growing without bound
		}
		return Op{Kind: OpFallocate, Slot: s, Flags: mode, Off: off, Len: n}
	default:
		s, ok := g.reflinkSlot(writable)
		if !ok {
			return g.openForReflink()
		}
		mode := 0x40 // UNSHARE_RANGE
		if g.chance(40) {
			mode |= 0x01 // KEEP_SIZE
		}
		return Op{Kind: OpFallocate, Slot: s, Flags: mode, Off: g.offset(g.fileSize(s)), Len: 1 + g.rng.Int64N(2*g.cfg.MaxIOBytes)}
	}
}

// reflinkSlot returns an open slot whose handle satisfies want, or
// (rarely, for the errors) any slot; false if there is no such handle.
func (g *Generator) reflinkSlot(want func(h *modelHandle) bool) (int, bool) {
	if g.chance(6) {
		return g.intn(g.cfg.Slots), true
	}
	var c []int
	for i := range g.cfg.Slots {
		if h := g.slot(i); h != nil && !h.closed && want(h) {
			c = append(c, i)
		}
	}
	if len(c) == 0 {
		return 0, false
	}
	return c[g.intn(len(c))], true
}

// openForReflink opens a file O_RDWR (creating it if need be) into a free
// slot, or closes a slot if none is free.
func (g *Generator) openForReflink() Op {
	s := g.freeSlot()
	if s < 0 {
		return Op{Kind: OpClose, Slot: g.intn(g.cfg.Slots)}
	}
	flags := syscall.O_RDWR | syscall.O_CREAT
	if g.chance(30) {
		flags |= syscall.O_DIRECT
	}
	return Op{Kind: OpOpen, Slot: s, Path: g.pickPath(isFile), Flags: flags, Perm: 0o644}
}

// partnerSlot returns the slot of the second file of a reflink call:
// often one open on first's file (first itself among them), otherwise
// one whose handle satisfies want, or (rarely) any.
func (g *Generator) partnerSlot(first int, want func(h *modelHandle) bool) int {
	if h := g.slot(first); h != nil && !h.closed && g.chance(35) {
		var c []int
		for i := range g.cfg.Slots {
			if o := g.slot(i); o != nil && !o.closed && o.n == h.n && want(o) {
				c = append(c, i)
			}
		}
		if len(c) > 0 {
			return c[g.intn(len(c))]
		}
	}
	s, ok := g.reflinkSlot(want)
	if !ok {
		return g.intn(g.cfg.Slots)
	}
	return s
}

// remapOff picks an offset for a reflink call in a file of size bytes:
// mostly a block boundary within it or at its end, sometimes misaligned.
func (g *Generator) remapOff(size int64) int64 {
	bs := g.cfg.BlockSize
	switch r := g.intn(100); {
	case r < 4:
		return g.rng.Int64N(size/bs+1)*bs + 1 + g.rng.Int64N(bs-1)
	case r < 25:
		return 0
	case r < 35:
		return roundUpTo(size, bs)
	default:
		return g.rng.Int64N((size+bs-1)/bs+1) * bs
	}
}

// remapLen picks the length of a reflink range from off in a file of size
// bytes: 0 (to EOF), exactly to EOF (a partial last block), whole blocks
// (mostly within EOF), or sometimes misaligned.
func (g *Generator) remapLen(off, size int64) int64 {
	bs := g.cfg.BlockSize
	blocks := min(g.cfg.MaxIOBytes/bs, 6)
	if avail := (size - off) / bs; avail >= 1 && g.chance(80) {
		blocks = min(blocks, avail)
	}
	switch r := g.intn(100); {
	case r < 12:
		return 0
	case r < 37 && size > off:
		return size - off
	case r < 92:
		return (1 + g.rng.Int64N(max(1, blocks))) * bs
	default:
		return 1 + g.rng.Int64N(2*bs)
	}
}

// equalRanges returns the block-aligned offsets in dst's file where the n
// bytes at srcOff of src's file are found (none for n == 0), so that a
// dedupe can share them.
func (g *Generator) equalRanges(src int, srcOff, n int64, dst int) []int64 {
	s, d := g.slot(src), g.slot(dst)
	if s == nil || d == nil || s.closed || d.closed || !s.n.isReg() || !d.n.isReg() {
		return nil
	}
	sd, dd := s.n.data, d.n.data
	if n == 0 || srcOff < 0 || srcOff+n > int64(len(sd)) {
		return nil
	}
	want := sd[srcOff : srcOff+n]
	var out []int64
	for off := int64(0); off+n <= int64(len(dd)); off += g.cfg.BlockSize {
		if slices.Equal(dd[off:off+n], want) {
			out = append(out, off)
		}
	}
	return out
}

// genOpen opens a file (often creating it) or, rarely, a directory, into a
// free slot; with no free slot it closes one instead.
func (g *Generator) genOpen() Op {
	s := g.freeSlot()
	if s < 0 {
		return Op{Kind: OpClose, Slot: g.intn(g.cfg.Slots)}
	}
	accs := []int{syscall.O_RDONLY, syscall.O_WRONLY, syscall.O_RDWR, syscall.O_RDWR, syscall.O_RDWR}
	flags := accs[g.intn(len(accs))]
	var path string
	if g.chance(8) {
		path = g.pickPath(isDir)
		flags = syscall.O_RDONLY
		if g.chance(20) {
			flags = syscall.O_RDWR // EISDIR
		}
	} else if g.chance(65) {
		path = g.pickPath(isFile)
	} else {
		path = g.newPath()
	}
	for _, f := range []struct {
		bit int
		pct int
	}{
		{syscall.O_CREAT, 55}, {syscall.O_TRUNC, 8}, {syscall.O_APPEND, 15}, {syscall.O_DIRECT, 30}, {syscall.O_DSYNC, 4},
	} {
		if g.chance(f.pct) {
			flags |= f.bit
		}
	}
	if flags&syscall.O_CREAT != 0 && g.chance(15) {
		flags |= syscall.O_EXCL
	}
	if g.cfg.ReflinkPerMille > 0 && flags&syscall.O_DIRECT != 0 {
		// XFS (the oracle of reflink sequences) does a block-misaligned
		// O_DIRECT write to a file that ever shared blocks as a buffered
		// write, so that one with O_APPEND ignores O_DIRECT's alignment
		// at a misaligned EOF (xfs_file_dio_write_unaligned).
		flags &^= syscall.O_APPEND
	}
	return Op{Kind: OpOpen, Slot: s, Path: path, Flags: flags, Perm: []uint32{0o644, 0o600, 0o755}[g.intn(3)]}
}

// Describe summarises a sequence: how many ops of each kind.
func Describe(steps []Step) string {
	counts := map[OpKind]int{}
	for _, s := range steps {
		counts[s.Op.Kind]++
	}
	kinds := make([]OpKind, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	out := ""
	for _, k := range kinds {
		out += fmt.Sprintf(" %s=%d", k, counts[k])
	}
	return out
}
