package sluice

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/volume"
)

// Problem is one inconsistency found by Check.
type Problem struct {
	// Kind is a stable identifier: corrupt-record, overlapping-extents,
	// extent-in-free-space, extent-out-of-range, free-out-of-range,
	// overlapping-free, dangling-entry, wrong-link-count, leaked-blocks,
	// extent-past-eof, extent-of-non-file, orphan-linked, bad-superblock,
	// bad-parent, wrong-refcount, staged-in-use.
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

func (p Problem) String() string { return p.Kind + ": " + p.Detail }

// CheckReport is what Check found.
type CheckReport struct {
	Problems    []Problem `json:"problems"`
	Inodes      int       `json:"inodes"`
	Directories int       `json:"directories"`
	Files       int       `json:"files"`
	Extents     int       `json:"extents"`
	DataBlocks  uint64    `json:"data_blocks"`
	UsedBlocks  uint64    `json:"used_blocks"`
	FreeBlocks  uint64    `json:"free_blocks"`
	// SharedBlocks counts the blocks more than one extent maps (reflink);
	// StagingBlocks the copy-on-write staging blocks (in UsedBlocks: a
	// crash leaves them, the next open frees them).
	SharedBlocks  uint64     `json:"shared_blocks"`
	StagingBlocks uint64     `json:"staging_blocks"`
	Orphans       []meta.Ino `json:"orphans"`
}

// Clean reports whether no problem was found.
func (r *CheckReport) Clean() bool { return len(r.Problems) == 0 }

func (r *CheckReport) add(kind, format string, args ...any) {
	if len(r.Problems) < 1000 {
		r.Problems = append(r.Problems, Problem{kind, fmt.Sprintf(format, args...)})
	}
}

// Check makes everything durable, then checks the metadata's consistency
// (see CheckVolume) in a snapshot, so that changes committed while it
// scans (an unlinked file's last close, say, which removes its inode and
// its orphan entry together) cannot be half seen.
func (fs *FS) Check() (*CheckReport, error) {
	if !fs.opts.ReadOnly && fs.shutdownErr() == nil {
		if err := fs.SyncAll(); err != nil {
			return nil, err
		}
	}
	snap := fs.kv.Snapshot()
	defer snap.Close()
	return checkKV(snap, fs.vol.Header)
}

// CheckVolume checks the metadata of a volume that no file system has
// open, without changing it (orphans are listed, not freed): extents do
// not overlap each other or free space; used + free = the data area;
// every directory entry points to a live inode; link counts match; sizes
// cover their written extents (unwritten ones may lie past EOF, as
// fallocate KEEP_SIZE leaves them).
func CheckVolume(v *volume.Volume) (*CheckReport, error) {
	return checkKV(v.KV, v.Header)
}

func checkKV(kv meta.Reader, h *volume.Header) (*CheckReport, error) {
	r := &CheckReport{}
	bs := uint64(h.BlockSize)
	total := h.DeviceBytes / bs
	r.DataBlocks = total - h.DataStart

	inodes := map[meta.Ino]*meta.Inode{}
	start, end := meta.InodeKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		in, err := meta.DecodeInode(v)
		if err != nil {
			r.add("corrupt-record", "inode key %x: %v", k, err)
			return nil
		}
		inodes[in.Ino] = in
		return nil
	}); err != nil {
		return nil, err
	}
	r.Inodes = len(inodes)
	var maxIno meta.Ino
	for ino, in := range inodes {
		maxIno = max(maxIno, ino)
		switch {
		case isDir(in.Mode):
			r.Directories++
		case isReg(in.Mode):
			r.Files++
		}
	}
	if sv, err := kv.Get(meta.SuperKey()); err != nil {
		r.add("bad-superblock", "%v", err)
	} else if sb, err := meta.DecodeSuperblock(sv); err != nil {
		r.add("bad-superblock", "%v", err)
	} else if sb.NextIno <= maxIno {
		r.add("bad-superblock", "next inode number %d is not above the largest inode %d", sb.NextIno, maxIno)
	}
	if root, ok := inodes[meta.RootIno]; !ok || !isDir(root.Mode) {
		r.add("bad-parent", "the root directory (inode 1) is missing or not a directory")
	}

	// Directory entries: targets exist, link counts.
	links := map[meta.Ino]uint32{}
	subdirs := map[meta.Ino]uint32{}
	start, end = meta.DirentKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		parent, name, err := meta.DirentName(k)
		if err != nil {
			r.add("corrupt-record", "%v", err)
			return nil
		}
		d, err := meta.DecodeDirent(v)
		if err != nil {
			r.add("corrupt-record", "entry %d/%q: %v", parent, name, err)
			return nil
		}
		p, ok := inodes[parent]
		if !ok || !isDir(p.Mode) {
			r.add("dangling-entry", "entry %q is in %d, which is not a directory", name, parent)
		}
		child, ok := inodes[d.Ino]
		if !ok {
			r.add("dangling-entry", "entry %d/%q points to missing inode %d", parent, name, d.Ino)
			return nil
		}
		links[d.Ino]++
		if isDir(child.Mode) {
			subdirs[parent]++
			if child.Parent != parent {
				r.add("bad-parent", "directory %d is entry %d/%q but records parent %d", d.Ino, parent, name, child.Parent)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	orphans := map[meta.Ino]bool{}
	start, end = meta.OrphanKeyRange()
	if err := kv.Scan(start, end, func(k, _ []byte) error {
		ino, err := meta.OrphanIno(k)
		if err != nil {
			r.add("corrupt-record", "%v", err)
			return nil
		}
		orphans[ino] = true
		r.Orphans = append(r.Orphans, ino)
		return nil
	}); err != nil {
		return nil, err
	}
	for ino, in := range inodes {
		want := links[ino]
		if isDir(in.Mode) {
			want, named := uint32(0), uint32(1)
			if in.Nlink != 0 {
				want = 2 + subdirs[ino]
			}
			if ino == meta.RootIno || in.Nlink == 0 {
				named = 0
			}
			if links[ino] != named {
				r.add("wrong-link-count", "directory %d is named by %d entries, want %d", ino, links[ino], named)
			}
			if in.Nlink != want {
				r.add("wrong-link-count", "directory %d has nlink %d, want %d", ino, in.Nlink, want)
			}
		} else if in.Nlink != want {
			r.add("wrong-link-count", "inode %d has nlink %d, but %d entries", ino, in.Nlink, want)
		}
		if in.Nlink == 0 && !orphans[ino] {
			r.add("wrong-link-count", "inode %d has no links and is not an orphan (leaked inode)", ino)
		}
		if orphans[ino] && in.Nlink > 0 {
			r.add("orphan-linked", "inode %d is an orphan but has %d links", ino, in.Nlink)
		}
	}

	// Symlink targets and extended attributes: decodable, and owned by a
	// live inode (every symlink has a target).
	targets := map[meta.Ino]bool{}
	start, end = meta.SymlinkKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		ino, err := meta.SymlinkIno(k)
		if err != nil {
			r.add("corrupt-record", "%v", err)
			return nil
		}
		if _, err := meta.DecodeBytes("symlink", v); err != nil {
			r.add("corrupt-record", "symlink target of inode %d: %v", ino, err)
		}
		if in, ok := inodes[ino]; !ok || !isSymlink(in.Mode) {
			r.add("dangling-entry", "symlink target record for inode %d, which is not a symlink", ino)
		}
		targets[ino] = true
		return nil
	}); err != nil {
		return nil, err
	}
	for ino, in := range inodes {
		if isSymlink(in.Mode) && !targets[ino] {
			r.add("corrupt-record", "symlink inode %d has no target", ino)
		}
	}
	start, end = meta.XattrKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		ino, name, err := meta.XattrName(k)
		if err != nil {
			r.add("corrupt-record", "%v", err)
			return nil
		}
		if _, err := meta.DecodeBytes("xattr", v); err != nil {
			r.add("corrupt-record", "xattr %q of inode %d: %v", name, ino, err)
		}
		if _, ok := inodes[ino]; !ok {
			r.add("dangling-entry", "xattr %q of missing inode %d", name, ino)
		}
		return nil
	}); err != nil {
		return nil, err
	}

	// Extents and free space: every data block is owned exactly once.
	var runs []devRun
	var prevIno meta.Ino
	var prevEnd uint64
	start, end = meta.ExtentKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		ino, e, err := meta.DecodeExtent(k, v)
		if err != nil {
			r.add("corrupt-record", "extent key %x: %v", k, err)
			return nil
		}
		r.Extents++
		in, ok := inodes[ino]
		switch {
		case !ok:
			r.add("extent-of-non-file", "extent of missing inode %d at file block %d", ino, e.FileBlock)
		case !isReg(in.Mode):
			r.add("extent-of-non-file", "extent of non-file inode %d", ino)
		case e.State == meta.Written && (e.FileBlock+e.Len)*bs > (in.Size+bs-1)/bs*bs:
			r.add("extent-past-eof", "inode %d (size %d) has written blocks [%d, %d)", ino, in.Size, e.FileBlock, e.FileBlock+e.Len)
		}
		if ino == prevIno && e.FileBlock < prevEnd {
			r.add("overlapping-extents", "inode %d: extents overlap at file block %d", ino, e.FileBlock)
		}
		prevIno, prevEnd = ino, e.FileBlock+e.Len
		if e.DevBlock < h.DataStart || e.DevBlock+e.Len > total {
			r.add("extent-out-of-range", "inode %d: device blocks [%d, %d) outside [%d, %d)", ino, e.DevBlock, e.DevBlock+e.Len, h.DataStart, total)
			return nil
		}
		runs = append(runs, devRun{start: e.DevBlock, end: e.DevBlock + e.Len, owner: ino})
		return nil
	}); err != nil {
		return nil, err
	}
	start, end = meta.FreeKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		s, n, err := meta.DecodeFree(k, v)
		if err != nil {
			r.add("corrupt-record", "free key %x: %v", k, err)
			return nil
		}
		if s < h.DataStart || s+n > total {
			r.add("free-out-of-range", "free blocks [%d, %d) outside [%d, %d)", s, s+n, h.DataStart, total)
			return nil
		}
		runs = append(runs, devRun{start: s, end: s + n, kind: runFree})
		r.FreeBlocks += n
		return nil
	}); err != nil {
		return nil, err
	}
	start, end = meta.StagedKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		s, n, err := meta.DecodeStaged(k, v)
		if err != nil {
			r.add("corrupt-record", "staged key %x: %v", k, err)
			return nil
		}
		if s < h.DataStart || s+n > total {
			r.add("extent-out-of-range", "staging blocks [%d, %d) outside [%d, %d)", s, s+n, h.DataStart, total)
			return nil
		}
		runs = append(runs, devRun{start: s, end: s + n, kind: runStaged})
		r.StagingBlocks += n
		return nil
	}); err != nil {
		return nil, err
	}
	start, end = meta.SharedKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		s, n, refs, err := meta.DecodeShared(k, v)
		if err != nil {
			r.add("corrupt-record", "shared key %x: %v", k, err)
			return nil
		}
		runs = append(runs, devRun{start: s, end: s + n, kind: runShared, refs: refs})
		return nil
	}); err != nil {
		return nil, err
	}
	sweepDevice(r, runs, h.DataStart, total)
	return r, nil
}

// devRun is a run of device blocks that a record names: an extent's (and
// its owner), a free extent, a staging run, or a shared run with its
// reference count.
type devRun struct {
	start, end uint64
	kind       runKind
	owner      meta.Ino // runExtent
	refs       uint32   // runShared
}

type runKind uint8

const (
	runExtent runKind = iota
	runFree
	runStaged
	runShared
)

// sweepDevice walks the data area once, in pieces over which no record
// starts or ends, and checks that every block is exactly one of: free,
// staged, or mapped by extents — by one, or by n >= 2 with a shared record
// counting n (and no shared record elsewhere). It counts used and shared
// blocks into r. (A sum would let one double-owned block hide a leaked
// one.)
func sweepDevice(r *CheckReport, runs []devRun, dataStart, total uint64) {
	type edge struct {
		at    uint64
		delta int
		run   int
	}
	edges := make([]edge, 0, 2*len(runs))
	for i, x := range runs {
		if x.end > x.start {
			edges = append(edges, edge{x.start, +1, i}, edge{x.end, -1, i})
		}
	}
	// Ends before starts at one block, so that touching runs never
	// count as overlapping.
	sort.Slice(edges, func(i, j int) bool {
		a, b := edges[i], edges[j]
		return a.at < b.at || a.at == b.at && a.delta < b.delta
	})
	var extents, free, staged int
	var refs uint32
	owners := map[int]struct{}{} // extent runs covering the piece
	var leaked, firstGap uint64
	reported := map[string]int{}
	report := func(kind, format string, args ...any) {
		if reported[kind] < 20 {
			r.add(kind, format, args...)
		}
		reported[kind]++
	}
	check := func(lo, hi uint64) {
		if lo >= hi {
			return
		}
		covered := extents + free + staged
		switch {
		case covered == 0:
			if lo >= dataStart && hi <= total {
				if leaked == 0 {
					firstGap = lo
				}
				leaked += hi - lo
			}
		case free > 1:
			report("overlapping-free", "free extents overlap at block %d", lo)
		case free == 1 && covered > 1:
			report("extent-in-free-space", "block %d is both free and %s", lo, describeOwners(runs, owners, staged))
		case staged > 0 && covered > 1:
			report("staged-in-use", "block %d is a staging block and %s", lo, describeOwners(runs, owners, staged-1))
		case extents >= 2 && refs == 0:
			report("overlapping-extents", "block %d is %s, with no shared record", lo, describeOwners(runs, owners, 0))
		}
		if extents > 0 {
			r.UsedBlocks += hi - lo
		}
		if extents >= 2 {
			r.SharedBlocks += hi - lo
		}
		if refs != 0 && uint32(extents) != refs {
			report("wrong-refcount", "blocks [%d, %d) have a shared record counting %d references, but %d extents map them", lo, hi, refs, extents)
		}
	}
	cur := dataStart
	for i := 0; i < len(edges); {
		at := edges[i].at
		if at > cur {
			check(cur, min(at, total))
			cur = at
		}
		for ; i < len(edges) && edges[i].at == at; i++ {
			e := edges[i]
			x := runs[e.run]
			switch x.kind {
			case runExtent:
				extents += e.delta
				if e.delta > 0 {
					owners[e.run] = struct{}{}
				} else {
					delete(owners, e.run)
				}
			case runFree:
				free += e.delta
			case runStaged:
				staged += e.delta
			case runShared:
				if e.delta > 0 {
					if refs != 0 {
						report("wrong-refcount", "shared records overlap at block %d", at)
					}
					refs = x.refs
				} else {
					refs = 0
				}
			}
		}
	}
	check(cur, total)
	r.UsedBlocks += r.StagingBlocks
	if leaked > 0 {
		r.add("leaked-blocks", "%d blocks are neither free nor owned (the first at block %d)", leaked, firstGap)
	}
	for kind, n := range reported {
		if n > 20 {
			r.add(kind, "%d more", n-20)
		}
	}
}

// describeOwners names the extents covering a block, for a problem report.
func describeOwners(runs []devRun, owners map[int]struct{}, staged int) string {
	var inos []meta.Ino
	for i := range owners {
		inos = append(inos, runs[i].owner)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	var parts []string
	for _, ino := range inos {
		parts = append(parts, fmt.Sprintf("inode %d", ino))
	}
	if staged > 0 {
		parts = append(parts, "a staging block")
	}
	if len(parts) == 0 {
		return "owned by nothing else"
	}
	return "owned by " + strings.Join(parts, " and ")
}
