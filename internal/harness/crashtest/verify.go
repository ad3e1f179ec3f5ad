package crashtest

import (
	"bytes"
	"fmt"
	"math"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
)

// Problem is one thing a crash point found wrong.
type Problem struct {
	// Kind is one of: reopen, check-before-recovery, check, orphans-left,
	// namespace, unknown-inode, size, stale-data, misplaced-data,
	// unexpected-write, unexpected-zeros, garbage, read, accounting,
	// probe, live.
	Kind   string
	Detail string
}

func (p Problem) String() string { return p.Kind + ": " + p.Detail }

// expectation is what a crash point may show.
type expectation struct {
	files map[sluice.Ino]*fileExpect
	// roots lists the worker roots, and nsCands the namespaces each root's
	// subtree may show.
	roots   []string
	nsCands map[string][]namespace
	// owner names the file of each file identity, for stale-data reports.
	owner map[uint64]string
}

// recoveredFile is what a file held after recovery: the base of the next
// generation's model.
type recoveredFile struct {
	ino    sluice.Ino
	id     uint64
	size   int64
	values map[int64]Tag
	nlink  int
	blocks int64 // Attr.Blocks
}

// recovered is the state found after a crash, when it passed.
type recovered struct {
	ns    namespace
	files map[sluice.Ino]*recoveredFile
	// shares says the volume had shared blocks.
	shares bool
}

// verifier checks a reopened file system against an expectation.
type verifier struct {
	fs       *sluice.FS
	exp      *expectation
	problems []Problem
	rec      *recovered
	// bufferedEvery makes every bufferedEvery-th file also read buffered.
	bufferedEvery int
	stats         *Stats
}

// Stats counts what crash points checked: files read back, those of them
// with exactly one allowed content and size (synced since their last
// change), those a clone or shift not durable yet left with more than one
// world, sectors read, and sectors holding workload data: of those, Cloned
// held another file's write (a clone brought it) and Moved this file's
// write of another offset (a clone within the file, a collapse or insert
// range). SharedPoints counts the crash points whose recovered volume had
// shared blocks, and SharedBlocks adds up their numbers. Clones,
// CowWrites and CowCopiedBlocks add up the engine's counters of the same
// names (clones that shared blocks; direct writes of shared blocks out of
// place; shared blocks copied before another write) over the runs, and
// DataSyncsFlushOnly the engine's fdatasyncs and O_DSYNC writes that
// synced no metadata, AtomicWrites and AtomicWritesOutOfPlace its untorn
// writes (all, and those that staged written blocks).
type Stats struct {
	Files, Sectors, Tagged, Exact, Worlds int
	Cloned, Moved                         int
	SharedPoints, SharedBlocks            int
	Clones, CowWrites, CowCopiedBlocks    int64
	DataSyncsFlushOnly                    int64
	AtomicWrites, AtomicWritesOutOfPlace  int64
	// SumVerifiedBlocks adds up the engine's counter; Corruptions counts
	// the corrupted reads corruptionProbe injected (each caught).
	SumVerifiedBlocks, Corruptions int64
}

// add adds o to s.
func (s *Stats) add(o Stats) {
	s.Files += o.Files
	s.Sectors += o.Sectors
	s.Tagged += o.Tagged
	s.Exact += o.Exact
	s.Worlds += o.Worlds
	s.Cloned += o.Cloned
	s.Moved += o.Moved
	s.SharedPoints += o.SharedPoints
	s.SharedBlocks += o.SharedBlocks
	s.Clones += o.Clones
	s.CowWrites += o.CowWrites
	s.CowCopiedBlocks += o.CowCopiedBlocks
	s.DataSyncsFlushOnly += o.DataSyncsFlushOnly
	s.AtomicWrites += o.AtomicWrites
	s.AtomicWritesOutOfPlace += o.AtomicWritesOutOfPlace
	s.SumVerifiedBlocks += o.SumVerifiedBlocks
	s.Corruptions += o.Corruptions
}

// addCounters adds the engine's reflink counters of fs.
func (s *Stats) addCounters(fs *sluice.FS) {
	c := fs.Counters()
	s.Clones += c["Clones"]
	s.CowWrites += c["CowWrites"]
	s.CowCopiedBlocks += c["CowCopiedBlocks"]
	s.DataSyncsFlushOnly += c["DataSyncsFlushOnly"]
	s.AtomicWrites += c["AtomicWrites"]
	s.AtomicWritesOutOfPlace += c["AtomicWritesOutOfPlace"]
	s.SumVerifiedBlocks += c["SumVerifiedBlocks"]
}

func (v *verifier) add(kind, format string, args ...any) {
	if len(v.problems) < 200 {
		v.problems = append(v.problems, Problem{kind, fmt.Sprintf(format, args...)})
	}
}

// walk lists the namespace of the whole file system (by inode number:
// path lookups cost a metadata read per component).
func walkNS(fs *sluice.FS) (namespace, error) {
	ns := namespace{}
	var walk func(dir string, ino sluice.Ino) error
	walk = func(dir string, ino sluice.Ino) error {
		ents, err := fs.ReadDirIno(ino)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name)
			isDir := e.Type == 0o040000
			ns[p] = nsEntry{ino: e.Ino, dir: isDir}
			if isDir {
				if err := walk(p, e.Ino); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return ns, walk("/", sluice.RootIno)
}

// subtree returns the entries of ns strictly below root.
func subtree(ns namespace, root string) namespace {
	out := namespace{}
	for p, e := range ns {
		if root == "/" || strings.HasPrefix(p, root+"/") {
			out[p] = e
		}
	}
	return out
}

func nsEqual(a, b namespace) bool {
	if len(a) != len(b) {
		return false
	}
	for p, e := range a {
		if f, ok := b[p]; !ok || f != e {
			return false
		}
	}
	return true
}

// nsDiff describes how got differs from want.
func nsDiff(got, want namespace) string {
	var d []string
	for p, e := range got {
		if f, ok := want[p]; !ok {
			d = append(d, fmt.Sprintf("+%s(ino %d)", p, e.ino))
		} else if f != e {
			d = append(d, fmt.Sprintf("~%s(ino %d, want %d)", p, e.ino, f.ino))
		}
	}
	for p, f := range want {
		if _, ok := got[p]; !ok {
			d = append(d, fmt.Sprintf("-%s(ino %d)", p, f.ino))
		}
	}
	sort.Strings(d)
	return strings.Join(d, " ")
}

// run checks everything after the file system was opened on the crash
// image (orphan recovery done).
func (v *verifier) run() {
	fs := v.fs
	report, err := fs.Check()
	if err != nil {
		v.add("check", "Check failed: %v", err)
		return
	}
	for _, p := range report.Problems {
		v.add("check", "after recovery: %v", p)
	}
	if len(report.Orphans) > 0 {
		v.add("orphans-left", "orphans left after recovery: %v", report.Orphans)
	}
	ns, err := walkNS(fs)
	if err != nil {
		v.add("namespace", "walking the namespace: %v", err)
		return
	}
	v.rec = &recovered{ns: ns, files: map[sluice.Ino]*recoveredFile{}}
	v.checkNamespace(ns)

	// Files, each inode once.
	paths := make([]string, 0, len(ns))
	for p, e := range ns {
		if !e.dir {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var maps []fileMap
	for i, p := range paths {
		ino := ns[p].ino
		if _, seen := v.rec.files[ino]; seen {
			continue
		}
		rf, fm := v.checkFile(p, ino, v.bufferedEvery > 0 && i%v.bufferedEvery == 0)
		if rf == nil {
			continue
		}
		v.rec.files[ino] = rf
		maps = append(maps, fm)
	}
	v.checkAccounting(report, maps)
	st, err := fs.Statfs()
	if err != nil {
		v.add("accounting", "Statfs: %v", err)
	} else if st.BlocksFree != report.FreeBlocks {
		v.add("accounting", "Statfs says %d free blocks, Check counts %d", st.BlocksFree, report.FreeBlocks)
	}
}

func (v *verifier) checkNamespace(ns namespace) {
	// Top level: the worker roots (concurrent cases) must all be there.
	if len(v.exp.roots) > 1 || v.exp.roots[0] != "/" {
		for p, e := range ns {
			if path.Dir(p) == "/" && !slices.Contains(v.exp.roots, p) {
				v.add("namespace", "unexpected top-level entry %s (ino %d)", p, e.ino)
			}
		}
		for _, r := range v.exp.roots {
			if e, ok := ns[r]; !ok || !e.dir {
				v.add("namespace", "worker directory %s is missing", r)
			}
		}
	}
	for _, r := range v.exp.roots {
		got := subtree(ns, r)
		cands := v.exp.nsCands[r]
		ok := false
		for _, c := range cands {
			if nsEqual(got, c) {
				ok = true
				break
			}
		}
		if !ok && len(cands) > 0 {
			v.add("namespace", "%s holds %v; it matches none of the %d namespaces allowed; against the last: %s; against the first: %s",
				r, got, len(cands), nsDiff(got, cands[len(cands)-1]), nsDiff(got, cands[0]))
		}
	}
}

// fileMap is what the accounting check needs of a file: its Blocks and
// its extents (FIEMAP, blocks past EOF included).
type fileMap struct {
	path    string
	ino     sluice.Ino
	blocks  int64 // Attr.Blocks, 512 B units
	extents []sluice.FiemapExtent
}

// checkFile reads file p (inode ino) and checks that it is one of the
// worlds the model allows: its size and every sector below it as that
// world has them (the first world that fits is taken; if none does, the
// problems are those of the world that fits best). It returns what the
// file holds, and its map.
func (v *verifier) checkFile(p string, ino sluice.Ino, buffered bool) (*recoveredFile, fileMap) {
	fs := v.fs
	fm := fileMap{path: p, ino: ino}
	e, ok := v.exp.files[ino]
	if !ok {
		v.add("unknown-inode", "%s is inode %d, which the workload never created", p, ino)
		return nil, fm
	}
	f, err := fs.OpenIno(ino, sluice.O_RDONLY|sluice.O_DIRECT)
	if err != nil {
		v.add("read", "open %s (ino %d): %v", p, ino, err)
		return nil, fm
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		v.add("read", "stat %s: %v", p, err)
		return nil, fm
	}
	fm.blocks = a.Blocks
	if fm.extents, err = f.Fiemap(0, math.MaxInt64, 0); err != nil {
		v.add("read", "fiemap %s: %v", p, err)
	}
	rf := &recoveredFile{ino: ino, id: e.id, size: a.Size, values: map[int64]Tag{}, nlink: int(a.Nlink), blocks: a.Blocks}
	if a.Size%SectorSize != 0 {
		v.add("size", "%s (ino %d) has size %d, not a multiple of %d", p, ino, a.Size, SectorSize)
		return rf, fm
	}
	buf, err := readFile(f, a.Size)
	if err != nil {
		v.add("read", "%s: %v", p, err)
		return rf, fm
	}
	if buffered {
		g, err := fs.OpenIno(ino, sluice.O_RDONLY)
		if err != nil {
			v.add("read", "open %s: %v", p, err)
			return rf, fm
		}
		defer g.Close()
		b2, err := readFile(g, a.Size)
		if err != nil {
			v.add("read", "%s (buffered): %v", p, err)
		} else if !bytes.Equal(buf, b2) {
			v.add("read", "%s: buffered and O_DIRECT reads differ", p)
		}
	}
	n := a.Size / SectorSize
	kinds := make([]SectorKind, n)
	tags := make([]Tag, n)
	for i := range n {
		kinds[i], tags[i] = decodeSector(buf[i*SectorSize : (i+1)*SectorSize])
	}
	fits := func(w *worldExpect, i int64) bool {
		c, ok := w.sec[i]
		if !ok {
			c = []Tag{{}}
		}
		switch kinds[i] {
		case Zero:
			return containsTag(c, Tag{})
		case Tagged:
			return containsTag(c, tags[i])
		}
		return false
	}
	// The world that fits: a wrong size weighs more than any sector.
	best, bestScore := 0, int64(-1)
	for k := range e.worlds {
		w := &e.worlds[k]
		score := int64(0)
		if !slices.Contains(w.sizes, a.Size) {
			score = n + 1
		}
		for i := int64(0); i < n && (bestScore < 0 || score < bestScore); i++ {
			if !fits(w, i) {
				score++
			}
		}
		if bestScore < 0 || score < bestScore {
			best, bestScore = k, score
		}
		if score == 0 {
			break
		}
	}
	w := &e.worlds[best]
	where := ""
	if len(e.worlds) > 1 {
		where = fmt.Sprintf(" in world %d of %d (the best fit)", best, len(e.worlds))
	}
	if !slices.Contains(w.sizes, a.Size) {
		v.add("size", "%s (ino %d) has size %d; allowed%s: %v", p, ino, a.Size, where, w.sizes)
	}
	if v.stats != nil {
		v.stats.Files++
		v.stats.Sectors += int(n)
		if e.exact() {
			v.stats.Exact++
		}
		if len(e.worlds) > 1 {
			v.stats.Worlds++
		}
	}
	bad := 0
	for i := int64(0); i < n; i++ {
		off := i * SectorSize
		kind, tag := kinds[i], tags[i]
		if fits(w, i) {
			if kind == Tagged {
				rf.values[i] = tag
				if v.stats != nil {
					v.stats.Tagged++
					switch {
					case tag.File != e.id:
						v.stats.Cloned++
					case tag.Off != off:
						v.stats.Moved++
					}
				}
			}
			continue
		}
		var kindName, msg string
		switch {
		case kind == Zero:
			kindName, msg = "unexpected-zeros", "reads zeros"
		case kind == Garbage:
			kindName, msg = "garbage", "holds bytes no write wrote (torn inside a sector or corrupt)"
		case tag.File == e.id && tag.Off == off:
			kindName, msg = "unexpected-write", fmt.Sprintf("holds write %d", tag.Seq)
		default:
			desc := describeSector(kind, tag)
			if tag.File != e.id {
				owner := v.exp.owner[tag.File]
				if owner == "" {
					owner = fmt.Sprintf("unknown file %#x", tag.File)
				}
				desc = fmt.Sprintf("write %d of %s at offset %d", tag.Seq, owner, tag.Off)
			}
			if j, ok := w.find(tag); ok {
				kindName, msg = "misplaced-data", fmt.Sprintf("holds %s, which this world allows at offset %d only", desc, j*SectorSize)
			} else if tag.File != e.id {
				kindName, msg = "stale-data", fmt.Sprintf("holds %s (STALE DATA from another file)", desc)
			} else {
				kindName, msg = "misplaced-data", fmt.Sprintf("holds %s", desc)
			}
		}
		bad++
		if bad <= 4 {
			c, ok := w.sec[i]
			if !ok {
				c = []Tag{{}}
			}
			v.add(kindName, "%s (ino %d, size %d) sector %d (offset %d) %s; allowed%s: %s", p, ino, a.Size, i, off, msg, where, describeCands(e.id, off, c))
		}
	}
	if bad > 4 {
		v.add("more", "%s: %d bad sectors in all", p, bad)
	}
	return rf, fm
}

// find returns a sector of w that may show v.
func (w *worldExpect) find(v Tag) (int64, bool) {
	for i, c := range w.sec {
		if containsTag(c, v) {
			return i, true
		}
	}
	return 0, false
}

// describeCands lists the values c a sector at offset off of file id may
// show: wN for this file's write N at off, else the whole tag.
func describeCands(id uint64, off int64, c []Tag) string {
	s := make([]string, len(c))
	for i, v := range c {
		switch {
		case v == (Tag{}):
			s[i] = "zeros"
		case v.File == id && v.Off == off:
			s[i] = "w" + itoa(v.Seq)
		case v.File == id:
			s[i] = fmt.Sprintf("w%d@%d", v.Seq, v.Off)
		default:
			s[i] = fmt.Sprintf("w%d@%#x:%d", v.Seq, v.File, v.Off)
		}
	}
	return "[" + strings.Join(s, " ") + "]"
}

// checkAccounting checks the space the files map against Check's counts.
// A block that n extents map (reflink) is in the Blocks of each file
// mapping it but counts once in UsedBlocks, so the files' Blocks add up to
// UsedBlocks - StagingBlocks + the sum over shared blocks of (n - 1), of
// which SharedBlocks (the number of shared blocks) is only a lower bound:
// the sum when no block has more than two references. So the references
// are counted here, from every file's FIEMAP: each file's extents add up
// to its Blocks; the distinct device blocks the files map, plus the
// staging blocks, are UsedBlocks; the blocks mapped more than once are
// SharedBlocks, and FIEMAP flags exactly those shared. After recovery
// no staging block is left (open frees them).
func (v *verifier) checkAccounting(report *sluice.CheckReport, maps []fileMap) {
	bs := uint64(v.fs.BlockSize())
	type edge struct {
		at     uint64
		delta  int
		shared bool
	}
	var edges []edge
	for _, m := range maps {
		var sum uint64
		for _, x := range m.extents {
			if x.Flags&sluice.FiemapExtentDelalloc != 0 {
				v.add("accounting", "%s (ino %d): a delayed allocation after recovery at offset %d", m.path, m.ino, x.Logical)
				continue
			}
			lo, n := x.Physical/bs, x.Length/bs
			sum += n
			sh := x.Flags&sluice.FiemapExtentShared != 0
			edges = append(edges, edge{lo, +1, sh}, edge{lo + n, -1, sh})
		}
		if int64(sum*bs/512) != m.blocks {
			v.add("accounting", "%s (ino %d) has Blocks %d (%d blocks); its extents add up to %d blocks", m.path, m.ino, m.blocks, m.blocks*512/int64(bs), sum)
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		a, b := edges[i], edges[j]
		return a.at < b.at || a.at == b.at && a.delta < b.delta
	})
	var refs, flagged int
	var distinct, shared, total, misflagged, firstMis uint64
	prev := uint64(0)
	for _, e := range edges {
		if n := e.at - prev; n > 0 && refs > 0 {
			distinct += n
			total += n * uint64(refs)
			if refs >= 2 {
				shared += n
			}
			if (refs >= 2 && flagged != refs) || (refs == 1 && flagged != 0) {
				if misflagged == 0 {
					firstMis = prev
				}
				misflagged += n
			}
		}
		prev = e.at
		refs += e.delta
		if e.shared {
			flagged += e.delta
		}
	}
	if distinct+report.StagingBlocks != report.UsedBlocks {
		v.add("accounting", "the files map %d distinct blocks (%d references) and %d are staging; Check counts %d used", distinct, total, report.StagingBlocks, report.UsedBlocks)
	}
	if shared != report.SharedBlocks {
		v.add("accounting", "%d blocks are mapped more than once; Check counts %d shared", shared, report.SharedBlocks)
	}
	if misflagged > 0 {
		v.add("accounting", "FIEMAP's shared flag disagrees with the references on %d blocks (the first at device block %d)", misflagged, firstMis)
	}
	if report.StagingBlocks != 0 {
		v.add("accounting", "%d staging blocks left after recovery", report.StagingBlocks)
	}
	v.rec.shares = report.SharedBlocks > 0
	if v.stats != nil && report.SharedBlocks > 0 {
		v.stats.SharedPoints++
		v.stats.SharedBlocks += int(report.SharedBlocks)
	}
}

// readAll reads file p of the given size, opened with flags.
func readAll(fs *sluice.FS, p string, size int64, flags int) ([]byte, error) {
	f, err := fs.OpenFile(p, sluice.O_RDONLY|flags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readFile(f, size)
}

// readFile reads the size bytes of f.
func readFile(f *sluice.File, size int64) ([]byte, error) {
	buf := device.AlignedBuf(int(size/4096+1) * 4096) // any I/O unit up to 4 KiB
	n, err := f.Pread(buf, 0, 0)
	if err != nil {
		return nil, err
	}
	if int64(n) != size {
		return nil, fmt.Errorf("read %d bytes, the size is %d", n, size)
	}
	return buf[:n], nil
}

// probe checks that the recovered file system keeps working: a new file
// written buffered and direct, fsynced, read back, truncated and removed,
// leaves the free space as it was and (with check) Check clean.
func (v *verifier) probe(name string, check bool) {
	fs := v.fs
	before, err := fs.Statfs()
	if err != nil {
		v.add("probe", "Statfs: %v", err)
		return
	}
	p := "/" + name
	f, err := fs.OpenFile(p, sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL, 0o644)
	if err != nil {
		v.add("probe", "create: %v", err)
		return
	}
	defer f.Close()
	g, err := fs.OpenFile(p, sluice.O_RDWR|sluice.O_DIRECT, 0)
	if err != nil {
		v.add("probe", "open O_DIRECT: %v", err)
		return
	}
	defer g.Close()
	bs := int64(fs.BlockSize())
	want := make([]byte, 3*bs)
	a := device.AlignedBuf(3 * SectorSize)
	for i := range 3 {
		fillSector(a[i*SectorSize:(i+1)*SectorSize], Tag{File: 1, Seq: 1, Off: int64(i * SectorSize)})
	}
	b := device.AlignedBuf(int(bs))
	for i := int64(0); i < bs; i += SectorSize {
		fillSector(b[i:i+SectorSize], Tag{File: 1, Seq: 2, Off: 2*bs + i})
	}
	copy(want, a)
	copy(want[2*bs:], b)
	if _, err := f.WriteAt(a, 0); err != nil {
		v.add("probe", "buffered write: %v", err)
		return
	}
	if _, err := g.WriteAt(b, 2*bs); err != nil {
		v.add("probe", "direct write: %v", err)
		return
	}
	if err := f.Fsync(); err != nil {
		v.add("probe", "fsync: %v", err)
		return
	}
	for _, fl := range []int{0, sluice.O_DIRECT} {
		got, err := readAll(fs, p, 3*bs, fl)
		if err != nil {
			v.add("probe", "read back: %v", err)
			return
		}
		if !bytes.Equal(got, want) {
			v.add("probe", "read back (flags %#x) differs from what was written", fl)
		}
	}
	if err := f.Truncate(SectorSize); err != nil {
		v.add("probe", "truncate: %v", err)
	}
	if err := fs.Unlink(p); err != nil {
		v.add("probe", "unlink: %v", err)
	}
	f.Close()
	g.Close()
	if err := fs.ReleaseStagingPool(); err != nil { // the writes' copies-on-write took some ahead
		v.add("probe", "ReleaseStagingPool: %v", err)
	}
	if check {
		r, err := fs.Check()
		if err != nil {
			v.add("probe", "Check: %v", err)
			return
		}
		for _, pr := range r.Problems {
			v.add("probe", "Check after the probe: %v", pr)
		}
	} else if err := fs.SyncAll(); err != nil {
		v.add("probe", "SyncAll: %v", err)
	}
	after, err := fs.Statfs()
	if err == nil && after.BlocksFree != before.BlocksFree {
		v.add("probe", "free blocks %d before the probe, %d after it", before.BlocksFree, after.BlocksFree)
	}
}
