package crashtest

import (
	"maps"
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
//   - Every one of those is a sync point, and a sync point also makes
//     durable every committed metadata change (namespace, sizes, truncate,
//     punch, zero range, fallocate) and every completed direct write, of
//     every file (the device is flushed, then conversions and attributes
//     are persisted, then the metadata is synced).
//
// Buffered data that no sync of its own file covered may or may not have
// reached the device: the model never assumes it did.
//
// A sector's history lists every value it held (0 for zeros, else the
// sequence number of the write that wrote it) in order, from its durable
// base; a crash may show any value from the base on, and nothing else. A
// file whose last sync came after its last change has a one-value history
// everywhere: its content after a crash is exact. Sizes and the namespace
// have histories of the same kind.

// sectorHist is the history of one sector. hist is append-only, so a copy
// of the slice header is a snapshot.
type sectorHist struct {
	hist []uint64
	// base indexes the oldest value a crash may still show.
	base int
	// dev indexes the newest value that reached the device (a direct
	// write) or committed metadata (truncate, punch, zero range): the next
	// sync point makes it the base. Buffered values never count.
	dev int
}

// fileModel is the model of one regular file.
type fileModel struct {
	id  uint64     // identity in sector tags
	ino sluice.Ino // its inode number
	// size is the current size; sizes its history (append-only) and
	// sizeBase the oldest size a crash may show.
	size     int64
	sizes    []int64
	sizeBase int
	sec      map[int64]*sectorHist
	nlink    int
	opens    int
}

func newFileModel(id uint64, ino sluice.Ino) *fileModel {
	return &fileModel{id: id, ino: ino, sizes: []int64{0}, sec: map[int64]*sectorHist{}, nlink: 1}
}

// cur returns the current value of sector i.
func (f *fileModel) cur(i int64) uint64 {
	if s := f.sec[i]; s != nil {
		return s.hist[len(s.hist)-1]
	}
	return 0
}

// set makes v the value of sector i; onDev says whether it is on the
// device or in committed metadata (rather than only in the page cache).
func (f *fileModel) set(i int64, v uint64, onDev bool) {
	s := f.sec[i]
	if s == nil {
		if v == 0 {
			return
		}
		s = &sectorHist{hist: []uint64{0}}
		f.sec[i] = s
	}
	if s.hist[len(s.hist)-1] != v {
		s.hist = append(s.hist, v)
	}
	if onDev {
		s.dev = len(s.hist) - 1
	}
}

// write records a write of n bytes at off by write seq.
func (f *fileModel) write(off, n int64, seq uint64, direct bool) {
	for o := off; o < off+n; o += SectorSize {
		f.set(o/SectorSize, seq, direct)
	}
	if off+n > f.size {
		f.setSize(off + n)
	}
}

// zero records that [off, off+n) reads as zeros (punch, zero range).
func (f *fileModel) zero(off, n int64) {
	for o := off; o < min(off+n, f.size); o += SectorSize {
		f.set(o/SectorSize, 0, true)
	}
}

// setSize records a new size; bytes past it read as zeros.
func (f *fileModel) setSize(n int64) {
	if n == f.size {
		return
	}
	if n < f.size {
		for i, s := range f.sec {
			if i*SectorSize >= n && s.hist[len(s.hist)-1] != 0 {
				f.set(i, 0, true)
			}
		}
	}
	f.size = n
	f.sizes = append(f.sizes, n)
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
// reached the device or the metadata, and the size.
func (f *fileModel) syncPoint() {
	for _, s := range f.sec {
		s.base = s.dev
	}
	f.sizeBase = len(f.sizes) - 1
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
		f.syncPoint()
	}
	m.nsBase = len(m.nsLog) - 1
}

// syncAll records SyncAll: everything is durable.
func (m *model) syncAll() {
	for _, f := range m.files {
		f.collapse()
	}
	m.syncPoint()
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
	sec      map[int64]sectorHist
}

func (m *model) snapshot() *modelSnap {
	s := &modelSnap{files: make(map[sluice.Ino]fileSnap, len(m.files)), nsLog: m.nsLog, nsBase: m.nsBase, ops: m.ops}
	for _, f := range m.files {
		fs := fileSnap{id: f.id, sizes: f.sizes, sizeBase: f.sizeBase, sec: make(map[int64]sectorHist, len(f.sec))}
		for i, h := range f.sec {
			fs.sec[i] = *h
		}
		s.files[f.ino] = fs
	}
	return s
}

// fileExpect is what a file may show after a crash.
type fileExpect struct {
	id    uint64
	sizes []int64
	// sec holds the values each sector may show; a sector not in it
	// must read as zeros.
	sec map[int64][]uint64
}

// expectFrom returns what each file may show after a crash that happened
// between snapshots a and b (a taken first; a == b for a crash at an
// instant): the values from a's bases to the end of b's histories.
func expectFrom(a, b *modelSnap) map[sluice.Ino]*fileExpect {
	out := make(map[sluice.Ino]*fileExpect, len(b.files))
	for ino, fb := range b.files {
		fa, hadA := a.files[ino]
		e := &fileExpect{id: fb.id, sec: make(map[int64][]uint64, len(fb.sec))}
		base := 0
		if hadA {
			base = fa.sizeBase
		}
		e.sizes = fb.sizes[base:]
		for i, h := range fb.sec {
			base := 0
			if hadA {
				if ha, ok := fa.sec[i]; ok {
					base = ha.base
				}
			}
			e.sec[i] = h.hist[base:]
		}
		out[ino] = e
	}
	return out
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
