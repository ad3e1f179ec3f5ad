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
}

// names are the components of generated paths: at most three levels of
// them, so that names collide often.
var names = []string{"a", "b", "c"}

// Generate returns the sequence for seed and the model's result for each
// step.
func Generate(seed uint64, cfg GenConfig) ([]Step, *Generator) {
	cfg.ensureDefaults()
	m := NewModel(cfg.DirectAlign)
	g := &Generator{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(seed, 0x5eed)),
		Model:   m,
		run:     NewRunner(m),
		Skipped: map[string]int{},
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
		steps = append(steps, Step{op, g.run.Apply(op)})
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
	seed := byte(1 + g.intn(255))
	switch r := g.intn(1000); {
	case r < 110:
		return g.genOpen()
	case r < 160:
		return Op{Kind: OpClose, Slot: g.openSlot(nil)}
	case r < 340:
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
