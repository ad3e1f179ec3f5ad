package crashtest

import (
	"maps"
	"math"
	"sort"
	"strings"

	"github.com/sluicefs/sluice"
)

// The model follows, for every file, what each 512 B sector and the size may
// read after a crash, as the engine's package doc promises it:
//
//   - Fsync and Fdatasync of a file make all of its data and its size
//     durable; SyncAll makes every file's durable.
//   - An O_DSYNC or O_SYNC write (or RWFDsync) makes the bytes it wrote
//     durable.
//   - Fsync, O_SYNC writes, a directory's fsync and SyncAll are sync
//     points, and a sync point also makes durable every committed metadata
//     change (namespace, sizes, truncate, punch, zero range, fallocate,
//     clones, collapse and insert range) and every completed direct write,
//     of every file (the device is flushed, then conversions and
//     attributes are persisted, then the metadata is synced).
//   - Fdatasync and O_DSYNC writes are sync points of their file alone
//     (fileSync): the engine flushes only the device when what reads the
//     file's data back is durable already.
//
// Buffered data that no sync of its own file covered may or may not have
// reached the device: the model never assumes it did.
//
// A sector's history lists every value it held (the zero Tag for zeros,
// else the Tag of the write whose sector it holds: this file's, at this
// offset, unless a clone or a shift brought it) in order, from its durable
// base; a crash may show any value from the base on, and nothing else. A
// file whose last sync came after its last change has a one-value history
// everywhere: its content after a crash is exact. Sizes and the namespace
// have histories of the same kind.
//
// Clones (into the file), collapse range and insert range change which
// blocks a range of the file maps, each in one metadata transaction, so a
// crash shows such a change whole or not at all until a sync point makes
// it durable. The model keeps the file's worlds: the current one, and one
// for the file as it was before each such change no sync point covered yet
// (the metadata a crash keeps is a prefix of the commits, so it shows the
// file in one world, with that world's sizes, and every sector as that
// world has it). The change starts the new world's sectors over (a cloned
// sector's history is the source sector's, from its base; a shifted
// sector's the sector it came from); the sectors it did not touch are
// shared with the world before it. A write after a shift into a block the
// shift moved may land in place, so it is also added to the sector that
// held the block in the world before (leak); writes after a clone into its
// range never reach the blocks the world before mapped there (they are
// freed, and busy until the clone is durable).

// sectorHist is the history of one sector. hist is append-only, so a copy
// of the slice header is a snapshot.
type sectorHist struct {
	hist []Tag
	// base indexes the oldest value a crash may still show.
	base int
	// dev indexes the newest value that reached the device (a direct
	// write) or committed metadata (truncate, punch, zero range, a clone
	// or a shift, whose ranges the engine writes back first): the next
	// sync point makes it the base. Buffered values never count.
	dev int
	// leak, if not nil, is the sector of the world before a shift that
	// maps this sector's block: every value written here is added there
	// too.
	leak *sectorHist
}

func newSectorHist(vals ...Tag) *sectorHist {
	if len(vals) == 0 {
		vals = []Tag{{}}
	}
	return &sectorHist{hist: vals, dev: len(vals) - 1}
}

// add appends v unless it is the last value.
func (s *sectorHist) add(v Tag) {
	if s.hist[len(s.hist)-1] != v {
		s.hist = append(s.hist, v)
	}
}

// world is a file as it was before a clone or shift that no sync point
// has made durable yet.
type world struct {
	sec map[int64]*sectorHist
	// sizeLo and sizeHi bound the file's sizes log: the sizes this world
	// may show.
	sizeLo, sizeHi int
	// affLo and affHi bound the sectors that the change ending this world
	// gave new histories; the next world shares every other sector.
	affLo, affHi int64
}

// fileModel is the model of one regular file.
type fileModel struct {
	id  uint64     // identity in sector tags
	ino sluice.Ino // its inode number
	// size is the current size; sizes its history (append-only) and
	// sizeBase the oldest size a crash may show; sizeLo the oldest the
	// current world may show (sizeBase, or the size a clone or shift
	// committed since).
	size     int64
	sizes    []int64
	sizeBase int
	sizeLo   int
	// sec is the current world's sectors, worlds the older ones (oldest
	// first), retired the worlds sync points dropped while the model
	// retained them (a concurrent crash's window).
	sec     map[int64]*sectorHist
	worlds  []*world
	retired []*world
	// syncs counts the sync points the file saw.
	syncs int
	// shares is set once the file took part in a clone (the engine's
	// mayShare).
	shares bool
	nlink  int
	opens  int
}

func newFileModel(id uint64, ino sluice.Ino) *fileModel {
	return &fileModel{id: id, ino: ino, sizes: []int64{0}, sec: map[int64]*sectorHist{}, nlink: 1}
}

// tag returns the value this file's write seq leaves at offset off.
func (f *fileModel) tag(seq uint64, off int64) Tag { return Tag{File: f.id, Seq: seq, Off: off} }

// cur returns the current value of sector i.
func (f *fileModel) cur(i int64) Tag {
	if s := f.sec[i]; s != nil {
		return s.hist[len(s.hist)-1]
	}
	return Tag{}
}

// newSector gives sector i of the current world a history (zeros so far),
// shared with the older worlds back to the first change that touched i.
func (f *fileModel) newSector(i int64) *sectorHist {
	s := newSectorHist()
	f.sec[i] = s
	for k := len(f.worlds) - 1; k >= 0; k-- {
		w := f.worlds[k]
		if i >= w.affLo && i < w.affHi {
			break
		}
		w.sec[i] = s
	}
	return s
}

// set makes v the value of sector i; onDev says whether it is on the
// device or in committed metadata (rather than only in the page cache).
func (f *fileModel) set(i int64, v Tag, onDev bool) {
	s := f.sec[i]
	if s == nil {
		if v == (Tag{}) {
			return
		}
		s = f.newSector(i)
	}
	s.add(v)
	if onDev {
		s.dev = len(s.hist) - 1
	}
	for l := s.leak; l != nil; l = l.leak {
		l.add(v)
	}
}

// write records a write of n bytes at off by write seq.
func (f *fileModel) write(off, n int64, seq uint64, direct bool) {
	for o := off; o < off+n; o += SectorSize {
		f.set(o/SectorSize, f.tag(seq, o), direct)
	}
	if off+n > f.size {
		f.setSize(off + n)
	}
}

// zero records that [off, off+n) reads as zeros (punch, zero range).
func (f *fileModel) zero(off, n int64) {
	for o := off; o < min(off+n, f.size); o += SectorSize {
		f.set(o/SectorSize, Tag{}, true)
	}
}

// setSize records a new size; bytes past it read as zeros.
func (f *fileModel) setSize(n int64) {
	if n == f.size {
		return
	}
	if n < f.size {
		for i, s := range f.sec {
			if i*SectorSize >= n && s.hist[len(s.hist)-1] != (Tag{}) {
				f.set(i, Tag{}, true)
			}
		}
	}
	f.pushSize(n)
}

// pushSize appends n to the sizes log.
func (f *fileModel) pushSize(n int64) {
	if n != f.size {
		f.size = n
		f.sizes = append(f.sizes, n)
	}
}

// collapse records that everything of the file is durable (its fsync).
func (f *fileModel) collapse() {
	for _, s := range f.sec {
		s.base, s.dev = len(s.hist)-1, len(s.hist)-1
	}
	f.sizeBase = len(f.sizes) - 1
}

// collapseRange records that the sectors of [off, off+n) are durable.
func (f *fileModel) collapseRange(off, n int64) {
	for o := off; o < off+n; o += SectorSize {
		if s := f.sec[o/SectorSize]; s != nil {
			s.base, s.dev = len(s.hist)-1, len(s.hist)-1
		}
	}
}

// syncPoint records what any sync point makes durable for the file: what
// reached the device or the metadata, the size, and the current world.
// With retain, the worlds it drops are kept in retired.
func (f *fileModel) syncPoint(retain bool) {
	for _, s := range f.sec {
		s.base = s.dev
		s.leak = nil
	}
	f.sizeBase = len(f.sizes) - 1
	f.sizeLo = f.sizeBase
	if retain {
		f.retired = append(f.retired, f.worlds...)
	}
	f.worlds = nil
	f.syncs++
}

// newWorld ends the current world before a change of the sectors
// [affLo, affHi): the current sectors become an older world, and the
// current world starts as a copy of it.
func (f *fileModel) newWorld(affLo, affHi int64) *world {
	w := &world{sec: f.sec, sizeLo: f.sizeLo, sizeHi: len(f.sizes), affLo: affLo, affHi: affHi}
	f.worlds = append(f.worlds, w)
	f.sec = maps.Clone(f.sec)
	return w
}

// segment returns a new history for a sector that takes s's block: the
// values s may show from its base (zeros if s is nil), all on the device
// (the engine writes the range back first).
func segment(s *sectorHist) *sectorHist {
	if s == nil {
		return newSectorHist()
	}
	return newSectorHist(append([]Tag(nil), s.hist[s.base:]...)...)
}

// cloneExtent returns, for CloneRange(src, srcOff, dstOff, n) of files of
// sizes ssize and dsize (n == 0: to the source's EOF) with block size bs,
// the bytes cloned, the bytes of whole blocks shared (past n when the range
// ends at the source's EOF), and whether the engine accepts the call
// (remapPrep's rules; same says the two are one file).
func cloneExtent(ssize, dsize, srcOff, dstOff, n, bs int64, same bool) (count, bcount int64, ok bool) {
	if n == 0 {
		n = ssize - srcOff
	}
	switch {
	case n <= 0, srcOff < 0, dstOff < 0, srcOff%bs != 0, dstOff%bs != 0, srcOff >= ssize, srcOff+n > ssize:
		return 0, 0, false
	case srcOff+n == ssize:
		bcount = (ssize+bs-1)/bs*bs - srcOff
	case n%bs != 0:
		return 0, 0, false
	default:
		bcount = n
	}
	if same && dstOff+bcount > srcOff && dstOff < srcOff+bcount {
		return 0, 0, false
	}
	if n%bs != 0 && dstOff+n < dsize {
		return 0, 0, false
	}
	return n, bcount, true
}

// clone records CloneRange(src, srcOff, dstOff, n) into f (cloneExtent
// accepted it): one transaction that maps the source's blocks (their
// contents written back first) into f and grows f, so a new world whose
// sectors of the shared blocks have the source sectors' histories.
func (f *fileModel) clone(src *fileModel, srcOff, dstOff, n, bcount int64) {
	for o := srcOff; o < srcOff+bcount; o += SectorSize {
		if s := src.sec[o/SectorSize]; s != nil {
			s.dev = len(s.hist) - 1 // written back
		}
	}
	f.shares, src.shares = true, true
	lo, k := dstOff/SectorSize, bcount/SectorSize
	pre := src.sec // before newWorld: f's own sectors as they were, if src is f
	f.newWorld(lo, lo+k)
	for i := range k {
		if s := pre[srcOff/SectorSize+i]; s != nil {
			f.sec[lo+i] = segment(s)
		} else {
			delete(f.sec, lo+i)
		}
	}
	f.pushSize(max(f.size, dstOff+n))
	f.sizeLo = len(f.sizes) - 1
}

// shift records FALLOC_FL_COLLAPSE_RANGE (collapse) or INSERT_RANGE of
// [off, off+n): one transaction that moves every block from off on, after
// the engine wrote them back, so a new world whose sectors from off on have
// the histories of the sectors whose blocks they now map (zeros for an
// insert's hole), each leaking into that sector.
func (f *fileModel) shift(collapse bool, off, n, bs int64) {
	lo, k := off/SectorSize, n/SectorSize
	// Every sector that may map a block: the sectors with a history and
	// those below EOF, to the end of their block.
	end := (f.size + SectorSize - 1) / SectorSize
	for i := range f.sec {
		end = max(end, i+1)
	}
	spb := bs / SectorSize
	end = (end + spb - 1) / spb * spb
	from := lo
	if collapse {
		from += k
	}
	for i := from; i < end+k; i++ {
		if f.sec[i] == nil {
			f.newSector(i)
		}
	}
	pre := f.newWorld(lo, math.MaxInt64).sec
	for i := range f.sec {
		if i >= lo {
			delete(f.sec, i)
		}
	}
	move := func(to, from int64) {
		s := segment(pre[from])
		s.leak = pre[from]
		f.sec[to] = s
	}
	if collapse {
		for i := lo; i < end; i++ {
			move(i, i+k)
		}
		f.pushSize(f.size - n)
	} else {
		for i := lo; i < end; i++ {
			move(i+k, i)
		}
		f.pushSize(f.size + n)
	}
	f.sizeLo = len(f.sizes) - 1
}

// nsEntry is one name in the namespace.
type nsEntry struct {
	ino sluice.Ino
	dir bool
}

// namespace maps every path below a worker's root (not the root itself) to
// its entry. A namespace is never changed once recorded: changes copy it.
type namespace map[string]nsEntry

func (ns namespace) String() string {
	paths := make([]string, 0, len(ns))
	for p, e := range ns {
		if e.dir {
			paths = append(paths, p+"/")
		} else {
			paths = append(paths, p+"="+itoa(uint64(e.ino)))
		}
	}
	sort.Strings(paths)
	return "{" + strings.Join(paths, " ") + "}"
}

// nsState is one namespace in the history, and the number of the op after
// which it held.
type nsState struct {
	ns namespace
	op int
}

// model is the model of one worker's files and subtree.
type model struct {
	files []*fileModel
	byIno map[sluice.Ino]*fileModel
	// ns is the current namespace, nsLog its history (append-only) and
	// nsBase the oldest entry a crash may show.
	ns     namespace
	nsLog  []nsState
	nsBase int
	// ops counts the ops applied.
	ops int
	// retain keeps the worlds sync points drop (fileModel.retired), while
	// a concurrent crash point's window is open.
	retain bool
}

func newModel(ns namespace) *model {
	m := &model{byIno: map[sluice.Ino]*fileModel{}, ns: ns}
	m.nsLog = []nsState{{ns: ns}}
	return m
}

func (m *model) addFile(f *fileModel) {
	m.files = append(m.files, f)
	m.byIno[f.ino] = f
}

// setNS records a namespace change (ns must be a fresh map).
func (m *model) setNS(ns namespace) {
	m.ns = ns
	m.nsLog = append(m.nsLog, nsState{ns: ns, op: m.ops + 1})
}

// editNS returns a copy of the current namespace to change.
func (m *model) editNS() namespace { return maps.Clone(m.ns) }

// syncPoint records a sync point: every file's committed state and the
// namespace are durable.
func (m *model) syncPoint() {
	for _, f := range m.files {
		f.syncPoint(m.retain)
	}
	m.nsBase = len(m.nsLog) - 1
}

// fileSync records what Fdatasync of f (or an O_DSYNC write to it)
// promises: a sync point for f alone, its data on the device, its size and
// its current world durable (the engine syncs no metadata when what reads
// f's data is durable already: no other file's state, nor the namespace,
// becomes durable then).
func (m *model) fileSync(f *fileModel) {
	f.syncPoint(m.retain)
}

// dataSync records what an O_DSYNC write through h promised once its bytes
// are recorded durable: a sync point with O_SYNC, fileSync otherwise.
func (m *model) dataSync(h *handle) {
	if h.sync {
		m.syncPoint()
	} else {
		m.fileSync(h.fm)
	}
}

// syncAll records SyncAll: everything is durable.
func (m *model) syncAll() {
	for _, f := range m.files {
		f.collapse()
	}
	m.syncPoint()
}

// setRetain starts (on) or ends a concurrent crash point's window.
func (m *model) setRetain(on bool) {
	m.retain = on
	if !on {
		for _, f := range m.files {
			f.retired = nil
		}
	}
}

// modelSnap is a copy of a model at one instant.
type modelSnap struct {
	files  map[sluice.Ino]fileSnap
	nsLog  []nsState
	nsBase int
	ops    int
}

type fileSnap struct {
	id       uint64
	sizes    []int64
	sizeBase int
	syncs    int
	// worlds are the file's worlds, the current one last; retired those
	// sync points dropped in the window.
	worlds  []worldSnap
	retired []worldSnap
}

type worldSnap struct {
	sec            map[int64]histSnap
	sizeLo, sizeHi int
}

// histSnap is a sector's history at the snapshot, and which one it is.
type histSnap struct {
	p    *sectorHist
	hist []Tag
	base int
}

func snapWorld(sec map[int64]*sectorHist, sizeLo, sizeHi int) worldSnap {
	w := worldSnap{sec: make(map[int64]histSnap, len(sec)), sizeLo: sizeLo, sizeHi: sizeHi}
	for i, h := range sec {
		w.sec[i] = histSnap{p: h, hist: h.hist, base: h.base}
	}
	return w
}

func (m *model) snapshot() *modelSnap {
	s := &modelSnap{files: make(map[sluice.Ino]fileSnap, len(m.files)), nsLog: m.nsLog, nsBase: m.nsBase, ops: m.ops}
	for _, f := range m.files {
		fs := fileSnap{id: f.id, sizes: f.sizes, sizeBase: f.sizeBase, syncs: f.syncs}
		for _, w := range f.worlds {
			fs.worlds = append(fs.worlds, snapWorld(w.sec, w.sizeLo, w.sizeHi))
		}
		fs.worlds = append(fs.worlds, snapWorld(f.sec, f.sizeLo, len(f.sizes)))
		for _, w := range f.retired {
			fs.retired = append(fs.retired, snapWorld(w.sec, w.sizeLo, w.sizeHi))
		}
		s.files[f.ino] = fs
	}
	return s
}

// fileExpect is what a file may show after a crash: the file as one of
// its worlds.
type fileExpect struct {
	id     uint64
	worlds []worldExpect
}

// worldExpect is one world a crash may show.
type worldExpect struct {
	sizes []int64
	// sec holds the values each sector may show; a sector not in it
	// must read as zeros.
	sec map[int64][]Tag
}

// exact reports whether the file has one allowed content and size.
func (e *fileExpect) exact() bool {
	if len(e.worlds) != 1 || len(e.worlds[0].sizes) != 1 {
		return false
	}
	for _, c := range e.worlds[0].sec {
		if len(c) != 1 {
			return false
		}
	}
	return true
}

// expectFrom returns what each file may show after a crash that happened
// between snapshots a and b (a taken first; a == b for a crash at an
// instant). If no sync point came between them, a file may show any of
// b's worlds (a world at the crash only gained values by b). Otherwise
// the worlds between are not all in b, and the file may show, at each
// sector, any value of any world of b or retired since a, from its base
// at a: a union that gives up a change's all-or-nothing for that crash.
func expectFrom(a, b *modelSnap) map[sluice.Ino]*fileExpect {
	out := make(map[sluice.Ino]*fileExpect, len(b.files))
	for ino, fb := range b.files {
		fa, hadA := a.files[ino]
		e := &fileExpect{id: fb.id}
		out[ino] = e
		if hadA && fa.syncs == fb.syncs {
			for _, w := range fb.worlds {
				we := worldExpect{sizes: fb.sizes[w.sizeLo:w.sizeHi], sec: make(map[int64][]Tag, len(w.sec))}
				for i, h := range w.sec {
					we.sec[i] = h.hist[h.base:]
				}
				e.worlds = append(e.worlds, we)
			}
			continue
		}
		baseA := map[*sectorHist]int{}
		sizeBase := 0
		if hadA {
			sizeBase = fa.sizeBase
			for _, w := range append(fa.worlds, fa.retired...) {
				for _, h := range w.sec {
					baseA[h.p] = h.base
				}
			}
		}
		all := append(append([]worldSnap(nil), fb.worlds...), fb.retired...)
		we := worldExpect{sizes: fb.sizes[sizeBase:], sec: map[int64][]Tag{}}
		seen := map[int64]int{}
		for _, w := range all {
			for i, h := range w.sec {
				seen[i]++
				c := we.sec[i]
				for _, v := range h.hist[baseA[h.p]:] {
					if !containsTag(c, v) {
						c = append(c, v)
					}
				}
				we.sec[i] = c
			}
		}
		for i, n := range seen {
			if n < len(all) && !containsTag(we.sec[i], Tag{}) {
				we.sec[i] = append(we.sec[i], Tag{}) // absent from some world: zeros there
			}
		}
		e.worlds = []worldExpect{we}
	}
	return out
}

func containsTag(c []Tag, v Tag) bool {
	for _, x := range c {
		if x == v {
			return true
		}
	}
	return false
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}
