package crashtest

import (
	"bytes"
	"fmt"
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
	values map[int64]uint64
	nlink  int
	blocks int64 // Attr.Blocks
}

// recovered is the state found after a crash, when it passed.
type recovered struct {
	ns    namespace
	files map[sluice.Ino]*recoveredFile
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
// change), sectors read, and sectors holding workload data.
type Stats struct {
	Files, Sectors, Tagged, Exact int
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
	var blocks int64
	for i, p := range paths {
		ino := ns[p].ino
		if _, seen := v.rec.files[ino]; seen {
			continue
		}
		rf := v.checkFile(p, ino, v.bufferedEvery > 0 && i%v.bufferedEvery == 0)
		if rf == nil {
			continue
		}
		v.rec.files[ino] = rf
		blocks += rf.blocks
	}
	bs := int64(fs.BlockSize())
	if uint64(blocks*512/bs) != report.UsedBlocks {
		v.add("accounting", "the files' Blocks add up to %d blocks, Check counts %d used", blocks*512/bs, report.UsedBlocks)
	}
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

// checkFile reads file p (inode ino) and checks its size and every sector.
func (v *verifier) checkFile(p string, ino sluice.Ino, buffered bool) *recoveredFile {
	fs := v.fs
	e, ok := v.exp.files[ino]
	if !ok {
		v.add("unknown-inode", "%s is inode %d, which the workload never created", p, ino)
		return nil
	}
	f, err := fs.OpenIno(ino, sluice.O_RDONLY|sluice.O_DIRECT)
	if err != nil {
		v.add("read", "open %s (ino %d): %v", p, ino, err)
		return nil
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		v.add("read", "stat %s: %v", p, err)
		return nil
	}
	if !slices.Contains(e.sizes, a.Size) {
		v.add("size", "%s (ino %d) has size %d; allowed: %v", p, ino, a.Size, e.sizes)
	}
	rf := &recoveredFile{ino: ino, id: e.id, size: a.Size, values: map[int64]uint64{}, nlink: int(a.Nlink), blocks: a.Blocks}
	if a.Size%SectorSize != 0 {
		v.add("size", "%s (ino %d) has size %d, not a multiple of %d", p, ino, a.Size, SectorSize)
		return rf
	}
	buf, err := readFile(f, a.Size)
	if err != nil {
		v.add("read", "%s: %v", p, err)
		return rf
	}
	if buffered {
		g, err := fs.OpenIno(ino, sluice.O_RDONLY)
		if err != nil {
			v.add("read", "open %s: %v", p, err)
			return rf
		}
		defer g.Close()
		b2, err := readFile(g, a.Size)
		if err != nil {
			v.add("read", "%s (buffered): %v", p, err)
		} else if !bytes.Equal(buf, b2) {
			v.add("read", "%s: buffered and O_DIRECT reads differ", p)
		}
	}
	bad := 0
	if v.stats != nil {
		v.stats.Files++
		v.stats.Sectors += int(a.Size / SectorSize)
		exact := len(e.sizes) == 1
		for _, c := range e.sec {
			exact = exact && len(c) == 1
		}
		if exact {
			v.stats.Exact++
		}
	}
	for i := int64(0); i < a.Size/SectorSize; i++ {
		off := i * SectorSize
		kind, tag := decodeSector(buf[off : off+SectorSize])
		cands := e.sec[i]
		if cands == nil {
			cands = []uint64{0}
		}
		var kindName, msg string
		switch {
		case kind == Zero:
			if slices.Contains(cands, 0) {
				continue
			}
			kindName, msg = "unexpected-zeros", "reads zeros"
		case kind == Garbage:
			kindName, msg = "garbage", "holds bytes no write wrote (torn inside a sector or corrupt)"
		case tag.File != e.id:
			owner := v.exp.owner[tag.File]
			if owner == "" {
				owner = fmt.Sprintf("unknown file %#x", tag.File)
			}
			kindName, msg = "stale-data", fmt.Sprintf("holds write %d of %s at offset %d (STALE DATA from another file)", tag.Seq, owner, tag.Off)
		case tag.Off != off:
			kindName, msg = "misplaced-data", fmt.Sprintf("holds write %d of this file at offset %d", tag.Seq, tag.Off)
		case !slices.Contains(cands, tag.Seq):
			kindName, msg = "unexpected-write", fmt.Sprintf("holds write %d", tag.Seq)
		default:
			rf.values[i] = tag.Seq
			if v.stats != nil {
				v.stats.Tagged++
			}
			continue
		}
		bad++
		if bad <= 4 {
			v.add(kindName, "%s (ino %d, size %d) sector %d (offset %d) %s; allowed: %s", p, ino, a.Size, i, off, msg, describeCands(cands))
		}
	}
	if bad > 4 {
		v.add("more", "%s: %d bad sectors in all", p, bad)
	}
	return rf
}

func describeCands(c []uint64) string {
	s := make([]string, len(c))
	for i, v := range c {
		if v == 0 {
			s[i] = "zeros"
		} else {
			s[i] = "w" + itoa(v)
		}
	}
	return "[" + strings.Join(s, " ") + "]"
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
