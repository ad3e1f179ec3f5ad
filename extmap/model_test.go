package extmap

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sluicefs/sluice/meta"
)

// This file holds the model-checking harness shared by the seeded random
// test and the fuzz test: a trivial per-block model of the file, a Recorder
// that replays changes into a record map (the record mirror), and the
// checks run after every operation.

// block is the model's state of one file block.
type block struct {
	dev, epoch uint64
	// old is the block that a remapped block replaced, which its record
	// still names.
	old    uint64
	mapped bool
	state  meta.ExtentState
	// remapped is set on a block that Remap moved from old to dev;
	// oldUnwritten too if old was a pending conversion (its record says
	// Unwritten).
	remapped, oldUnwritten bool
}

// durable reports whether x is mapped durable written: the blocks that
// may be shared.
func (x block) durable() bool { return x.mapped && x.state == meta.Written && x.epoch == 0 }

// written reports whether x is mapped written, durable or not, remapped or
// not: the blocks that Remap takes.
func (x block) written() bool { return x.mapped && x.state == meta.Written }

// source supplies the harness's choices: a seeded PRNG, or fuzz bytes.
type source interface {
	// intn returns a number in [0, n), n > 0.
	intn(n int) int
	// exhausted reports whether a byte source has run dry.
	exhausted() bool
}

type randSource struct{ r *rand.Rand }

func (s randSource) intn(n int) int  { return s.r.IntN(n) }
func (s randSource) exhausted() bool { return false }

// byteSource reads choices from fuzz input, one or two bytes each; past
// the end it returns 0.
type byteSource struct {
	b   []byte
	off int
}

func (s *byteSource) intn(n int) int {
	var v int
	if s.off < len(s.b) {
		v = int(s.b[s.off])
		s.off++
	}
	if n > 256 && s.off < len(s.b) {
		v = v<<8 | int(s.b[s.off])
		s.off++
	}
	return v % n
}

func (s *byteSource) exhausted() bool { return s.off >= len(s.b) }

// harness runs operations against a Map and the model, and checks them.
type harness struct {
	t   testing.TB
	src source
	// name identifies the run in failures (the seed).
	name string

	m     *Map
	model []block // file blocks [0, len(model)); beyond is a hole
	// used counts the references to each device block: one for each block
	// of the model that maps it, and one for each remapped block whose
	// record names it (as old). Blocks with no reference are absent.
	used   map[uint64]int
	next   uint64 // next fresh device block
	epoch  uint64 // current conversion epoch; MarkDurable goes up to it
	mirror map[uint64]meta.Extent
	// opKeys counts the keys one operation named, to check that a
	// mutation (other than MarkDurable) names each key at most once.
	opKeys  map[uint64]int
	history []string
	segs    []Segment
}

// Put implements Recorder by replaying into the mirror.
func (h *harness) Put(e Extent) {
	h.mirror[e.FileBlock] = e.Persisted()
	h.opKeys[e.FileBlock]++
}

// Delete implements Recorder by replaying into the mirror.
func (h *harness) Delete(fb uint64) {
	if _, ok := h.mirror[fb]; !ok {
		h.fail("Delete(%d) of a record that does not exist", fb)
	}
	delete(h.mirror, fb)
	h.opKeys[fb]++
}

func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	hist := h.history
	if len(hist) > 40 {
		hist = hist[len(hist)-40:]
	}
	h.t.Fatalf("%s: %s\nlast operations:\n  %s\nextents: %v", h.name, fmt.Sprintf(format, args...),
		strings.Join(hist, "\n  "), h.m.Extents())
}

func (h *harness) logf(format string, args ...any) {
	h.history = append(h.history, fmt.Sprintf(format, args...))
}

// newHarness starts from an empty map or from random records (mergeable
// neighbours included, so Load's keep-the-boundaries rule is exercised).
func newHarness(t testing.TB, src source, name string) *harness {
	size := 16 + src.intn(497)
	h := &harness{
		t: t, src: src, name: name,
		model: make([]block, size), used: map[uint64]int{},
		next: uint64(src.intn(1000)), epoch: 1,
		mirror: map[uint64]meta.Extent{}, opKeys: map[uint64]int{},
	}
	var records []meta.Extent
	if src.intn(2) == 0 {
		for fb := uint64(src.intn(8)); fb < uint64(size); {
			n := min(uint64(1+src.intn(12)), uint64(size)-fb)
			dev := h.freshDev(n)
			if src.intn(3) == 0 && len(records) > 0 {
				// Sometimes a record mergeable with the previous one.
				prev := records[len(records)-1]
				if prev.FileBlock+prev.Len == fb && h.devFree(prev.DevBlock+prev.Len, n) {
					dev = prev.DevBlock + prev.Len
				}
			}
			state := meta.Written
			if src.intn(2) == 0 {
				state = meta.Unwritten
			}
			if r := records[src.intn(len(records)+1):]; state == meta.Written && len(r) > 0 && r[0].State == meta.Written &&
				r[0].Len >= n && src.intn(3) == 0 {
				// Sometimes a written record that shares device blocks
				// with an earlier one (a reflink clone within the file).
				dev = r[0].DevBlock + uint64(src.intn(int(r[0].Len-n+1)))
			}
			records = append(records, meta.Extent{FileBlock: fb, DevBlock: dev, Len: n, State: state})
			h.setModel(fb, n, dev, state, 0)
			fb += n + uint64(src.intn(3))*uint64(src.intn(6))
		}
	}
	for i, r := range records {
		h.mirror[r.FileBlock] = r
		j := src.intn(i + 1)
		records[i], records[j] = records[j], records[i]
	}
	m, err := Load(records)
	if err != nil {
		t.Fatalf("%s: Load: %v", name, err)
	}
	h.m = m
	if src.intn(2) == 0 {
		// A flat index for only a few extents, or none, so that maps
		// cross between it and the B-tree.
		m.smallLimit = src.intn(8)
		m.reindex()
	}
	h.logf("Load(%d records), flat index up to %d extents", len(records), m.smallLimit)
	h.verify()
	return h
}

// ref and unref add and drop a reference to each of device blocks
// [d, d+n).
func (h *harness) ref(d, n uint64) {
	for i := range n {
		h.used[d+i]++
	}
}

func (h *harness) unref(d, n uint64) {
	for i := range n {
		if h.used[d+i]--; h.used[d+i] <= 0 {
			delete(h.used, d+i)
		}
	}
}

// freshDev returns n device blocks never used before.
func (h *harness) freshDev(n uint64) uint64 {
	d := h.next
	h.next += n + uint64(h.src.intn(2))
	return d
}

func (h *harness) devFree(d, n uint64) bool {
	for i := range n {
		if h.used[d+i] > 0 {
			return false
		}
	}
	return true
}

func (h *harness) setModel(fb, n, dev uint64, state meta.ExtentState, epoch uint64) {
	for i := range n {
		h.model[fb+i] = block{mapped: true, dev: dev + i, state: state, epoch: epoch}
	}
	h.ref(dev, n)
}

// unmap drops the references of block x of the model, which is being
// unmapped, and counts them in freed (the blocks Remove or CollapseRange
// must return).
func (h *harness) unmap(x block, freed map[uint64]int) {
	if !x.mapped {
		return
	}
	freed[x.dev]++
	h.unref(x.dev, 1)
	if x.remapped {
		freed[x.old]++
		h.unref(x.old, 1)
	}
}

// remapWant is what a Remapping must say of one new block.
type remapWant struct {
	old          uint64
	oldUnwritten bool
}

// settle makes remapped block x of the model plain, its record now naming
// its new block, and records the move in remaps (new block -> old block,
// the Remappings MarkDurable and Unconvert must return).
func (h *harness) settle(x *block, remaps map[uint64]remapWant) {
	if x.remapped {
		remaps[x.dev] = remapWant{old: x.old, oldUnwritten: x.oldUnwritten}
		h.unref(x.old, 1)
		x.remapped, x.old, x.oldUnwritten = false, 0, false
	}
}

func (h *harness) at(fb uint64) block {
	if fb < uint64(len(h.model)) {
		return h.model[fb]
	}
	return block{}
}

// pickRange returns a range, mostly inside the model, sometimes past it or
// running to the end of the block space.
func (h *harness) pickRange() (fb, n uint64) {
	size := len(h.model)
	fb = uint64(h.src.intn(size + 4))
	switch h.src.intn(16) {
	case 0:
		return fb, math.MaxUint64 // clipped at 2^64-1
	case 1:
		return fb, math.MaxUint64 - fb
	case 2:
		return fb, 0
	case 3:
		return math.MaxUint64 - 1 - uint64(h.src.intn(2)), uint64(h.src.intn(3))
	}
	return fb, uint64(1 + h.src.intn(1+size/4))
}

// step runs one random operation and checks everything.
func (h *harness) step() {
	clear(h.opKeys)
	allowRepeat := false
	switch op := h.src.intn(22); {
	case op < 7:
		h.insert()
	case op < 11:
		fb, n := h.pickRange()
		epoch := uint64(0)
		if h.src.intn(4) != 0 {
			epoch = h.epoch - uint64(h.src.intn(int(min(h.epoch, 3))))
		}
		h.logf("Convert(%d, %d, %d)", fb, n, epoch)
		h.m.Convert(fb, n, epoch, h)
		for b := fb; b < rangeEnd(fb, n) && b < uint64(len(h.model)); b++ {
			if x := &h.model[b]; x.mapped && x.state == meta.Unwritten {
				x.state, x.epoch = meta.Written, epoch
			}
		}
	case op < 13:
		fb, n := h.pickRange()
		// The engine never unconverts a shared block: stop before one.
		for b := fb; b < rangeEnd(fb, n) && b < uint64(len(h.model)); b++ {
			if x := h.model[b]; x.mapped && h.used[x.dev] > 1 {
				n = b - fb
				break
			}
		}
		h.logf("Unconvert(%d, %d)", fb, n)
		got := h.m.Unconvert(fb, n, h)
		want := map[uint64]remapWant{}
		for b := fb; b < rangeEnd(fb, n) && b < uint64(len(h.model)); b++ {
			if x := &h.model[b]; x.mapped && x.state == meta.Written {
				h.settle(x, want)
				x.state, x.epoch = meta.Unwritten, 0
			}
		}
		h.checkRemappings("Unconvert", got, want)
	case op < 15:
		h.remove()
	case op < 16:
		if h.src.intn(2) == 0 {
			h.collapse()
		} else {
			h.insertRange()
		}
	case op < 19:
		upTo := uint64(h.src.intn(int(h.epoch) + 1))
		h.logf("MarkDurable(%d)", upTo)
		got := h.m.MarkDurable(upTo, h)
		allowRepeat = true
		want := map[uint64]remapWant{}
		for i := range h.model {
			if x := &h.model[i]; x.epoch > 0 && x.epoch <= upTo {
				h.settle(x, want)
				x.epoch = 0
			}
		}
		h.checkRemappings("MarkDurable", got, want)
	case op < 20:
		h.epoch++ // a flush started: later conversions belong to the next epoch
		h.logf("epoch -> %d", h.epoch)
	default:
		h.remap()
	}
	if !allowRepeat {
		for k, c := range h.opKeys {
			if c > 1 {
				h.fail("record %d named %d times by one operation", k, c)
			}
		}
	}
	h.verify()
}

func (h *harness) insert() {
	size := uint64(len(h.model))
	fb := uint64(h.src.intn(int(size)))
	// The hole run from fb, if fb is a hole.
	run := uint64(0)
	for fb+run < size && !h.model[fb+run].mapped {
		run++
	}
	n := uint64(1 + h.src.intn(16))
	expectOK := run > 0 && n <= run
	if run > 0 && h.src.intn(4) != 0 {
		n = min(n, run)
		expectOK = true
	}
	if fb+n > size {
		n = size - fb
		expectOK = run >= n
	}
	state := meta.Written
	if h.src.intn(2) == 0 {
		state = meta.Unwritten
	}
	var epoch uint64
	if state == meta.Written && h.src.intn(3) == 0 {
		epoch = h.epoch - uint64(h.src.intn(int(min(h.epoch, 2))))
	}
	// Device placement: after the left neighbour's blocks, before the
	// right neighbour's (both exercise merging), the blocks of a run of
	// durable written blocks of the file (a reflink clone within the file),
	// or fresh.
	dev := h.freshDev(n)
	switch h.src.intn(3) {
	case 0:
		if l := h.at(fb - 1); fb > 0 && l.mapped && h.devFree(l.dev+1, n) {
			dev = l.dev + 1
		}
	case 1:
		if r := h.at(fb + n); r.mapped && r.dev >= n && h.devFree(r.dev-n, n) {
			dev = r.dev - n
		}
	case 2:
		if state != meta.Written || epoch != 0 || h.src.intn(2) == 0 {
			break
		}
		src := uint64(h.src.intn(int(size)))
		for src < size && !h.model[src].durable() {
			src++
		}
		run := uint64(0)
		for src+run < size && run < n && h.model[src+run].durable() && h.model[src+run].dev == h.at(src).dev+run {
			run++
		}
		if run == n {
			dev = h.model[src].dev
		}
	}
	e := Extent{FileBlock: fb, DevBlock: dev, Len: n, State: state, Epoch: epoch}
	if h.src.intn(40) == 0 {
		// Invalid extents: empty, unwritten with an epoch, overflowing,
		// remapped (only Remap makes remaps), old block or old state
		// without a remap.
		switch h.src.intn(6) {
		case 0:
			e.Len = 0
		case 1:
			e.State, e.Epoch = meta.Unwritten, 1
		case 2:
			e.DevBlock = math.MaxUint64 - 1
			e.Len = 2
		case 3:
			e.State, e.Epoch, e.Remapped, e.OldDevBlock = meta.Written, 1, true, h.next
		case 4:
			e.OldDevBlock = 1
		case 5:
			e.OldUnwritten = true
		}
		before := h.m.Extents()
		h.logf("Insert(%v) invalid", e)
		if err := h.m.Insert(e, h); !errors.Is(err, ErrInvalid) {
			h.fail("Insert(%v) = %v, want ErrInvalid", e, err)
		}
		if len(h.opKeys) != 0 || !slices.Equal(before, h.m.Extents()) {
			h.fail("failed Insert changed something")
		}
		return
	}
	h.logf("Insert(%v)", e)
	err := h.m.Insert(e, h)
	switch {
	case expectOK && err != nil:
		h.fail("Insert(%v) into a hole: %v", e, err)
	case !expectOK && !errors.Is(err, ErrMapped):
		h.fail("Insert(%v) over a mapped block = %v, want ErrMapped", e, err)
	case !expectOK && len(h.opKeys) != 0:
		h.fail("failed Insert recorded changes")
	case expectOK:
		h.setModel(fb, n, dev, state, epoch)
	}
}

func (h *harness) remove() {
	fb, n := h.pickRange()
	h.logf("Remove(%d, %d)", fb, n)
	freed := h.m.Remove(fb, n, h)
	want := map[uint64]int{}
	for b := fb; b < rangeEnd(fb, n) && b < uint64(len(h.model)); b++ {
		h.unmap(h.model[b], want)
		h.model[b] = block{}
	}
	h.checkFreed("Remove", freed, want)
}

// remap runs Remap, mostly over a run of written blocks (durable, pending
// conversions, remapped), to fresh device blocks or to the blocks after the
// left neighbour's (a sequential copy-on-write, which merges), and
// sometimes over a range with a hole or an unwritten block, or with epoch 0
// or an overflowing device range: then it must fail and change nothing.
func (h *harness) remap() {
	size := uint64(len(h.model))
	eligible := func(b uint64) bool { return h.at(b).written() }
	var fb, n uint64
	if h.src.intn(6) == 0 {
		fb, n = h.pickRange()
	} else {
		// From the first eligible block at or after a random one,
		// wrapping around (from the random one if none is).
		start := uint64(h.src.intn(int(size)))
		fb = start
		for i := range size {
			if b := (start + i) % size; eligible(b) {
				fb = b
				break
			}
		}
		run := uint64(0)
		for fb+run < size && eligible(fb+run) {
			run++
		}
		n = uint64(1 + h.src.intn(int(max(run, 1))))
		if h.src.intn(8) == 0 {
			n = run + 1 // one block too many
		}
	}
	epoch := h.epoch - uint64(h.src.intn(int(min(h.epoch, 3))))
	ok := n > 0 && fb+n > fb
	for b := fb; ok && b < fb+n; b++ {
		ok = eligible(b)
	}
	dev := h.next
	if ok {
		dev = h.freshDev(n)
		if l := h.at(fb - 1); fb > 0 && l.remapped && h.src.intn(2) == 0 && h.devFree(l.dev+1, n) {
			dev, epoch = l.dev+1, l.epoch
		}
	}
	switch h.src.intn(30) {
	case 0:
		epoch, ok = 0, false
	case 1:
		dev, ok = math.MaxUint64-uint64(h.src.intn(int(min(max(n, 1), 4)))), false
	}
	if !ok {
		before := h.m.Extents()
		h.logf("Remap(%d, %d, %d, %d) invalid", fb, n, dev, epoch)
		released, err := h.m.Remap(fb, n, dev, epoch, h)
		var e *Error
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &e) || e.Op != "remap" {
			h.fail("Remap(%d, %d, %d, %d) = %v, want ErrInvalid", fb, n, dev, epoch, err)
		}
		if released != nil || len(h.opKeys) != 0 || !slices.Equal(before, h.m.Extents()) {
			h.fail("failed Remap changed something")
		}
		return
	}
	h.logf("Remap(%d, %d, %d, %d)", fb, n, dev, epoch)
	released, err := h.m.Remap(fb, n, dev, epoch, h)
	if err != nil {
		h.fail("Remap(%d, %d, %d, %d): %v", fb, n, dev, epoch, err)
	}
	want := map[uint64]int{}
	for i := range n {
		x := &h.model[fb+i]
		// The old block is the one the record names: a durable block's
		// own (Written), a pending conversion's own (Unwritten), or that
		// of a remapped block, whose staged block is released.
		y := block{mapped: true, dev: dev + i, state: meta.Written, epoch: epoch, remapped: true, old: x.dev, oldUnwritten: x.epoch > 0}
		if x.remapped {
			y.old, y.oldUnwritten = x.old, x.oldUnwritten
			want[x.dev]++
			h.unref(x.dev, 1)
		}
		*x = y
	}
	h.ref(dev, n)
	h.checkFreed("Remap", released, want)
}

// collapse runs CollapseRange and applies it to the model: the blocks of
// the range go (their device blocks are what it must free), the blocks
// after it move down.
func (h *harness) collapse() {
	fb, n := h.pickRange()
	h.logf("CollapseRange(%d, %d)", fb, n)
	freed := h.m.CollapseRange(fb, n, h)
	want := map[uint64]int{}
	end := rangeEnd(fb, n)
	for b := fb; b < end && b < uint64(len(h.model)); b++ {
		h.unmap(h.model[b], want)
	}
	if fb < uint64(len(h.model)) {
		var rest []block
		if end < uint64(len(h.model)) {
			rest = h.model[end:]
		}
		h.model = append(h.model[:fb:fb], rest...)
		if len(h.model) < 16 {
			h.model = append(h.model, make([]block, 16-len(h.model))...)
		}
	}
	h.checkFreed("CollapseRange", freed, want)
}

// insertRange runs InsertRange and applies it to the model: n holes at fb.
func (h *harness) insertRange() {
	fb := uint64(h.src.intn(len(h.model) + 4))
	n := uint64(h.src.intn(1 + max(0, min(64, 1024-len(h.model)/2))))
	if h.src.intn(30) == 0 {
		// Past block 2^64-1: refused, nothing changes.
		n = math.MaxUint64 - uint64(h.src.intn(4))
		before := h.m.Extents()
		h.logf("InsertRange(%d, %d) overflowing", fb, n)
		err := h.m.InsertRange(fb, n, h)
		if last, ok := h.m.LastBlock(); ok && last > fb && !errors.Is(err, ErrInvalid) {
			h.fail("InsertRange(%d, %d) = %v, want ErrInvalid", fb, n, err)
		}
		if err != nil && (len(h.opKeys) != 0 || !slices.Equal(before, h.m.Extents())) {
			h.fail("failed InsertRange changed something")
		}
		if err == nil && !slices.Equal(before, h.m.Extents()) {
			h.fail("InsertRange with nothing at or after %d changed something", fb)
		}
		return
	}
	h.logf("InsertRange(%d, %d)", fb, n)
	if err := h.m.InsertRange(fb, n, h); err != nil {
		h.fail("InsertRange(%d, %d): %v", fb, n, err)
	}
	if fb < uint64(len(h.model)) {
		h.model = slices.Insert(h.model, int(fb), make([]block, n)...)
	}
}

// checkFreed checks that freed lists exactly the device blocks want, each
// as many times as want counts it, sorted by Start and coalesced: no range
// starts where the one before ends, and ranges overlap only where a block
// is wanted more than once. It wants nil if want is empty.
func (h *harness) checkFreed(op string, freed []DevRange, want map[uint64]int) {
	if len(want) == 0 && freed != nil {
		h.fail("%s returned %v, want nil", op, freed)
	}
	got := map[uint64]int{}
	for i, r := range freed {
		if r.Len == 0 {
			h.fail("%s returned an empty range: %v", op, freed)
		}
		if i > 0 && (freed[i-1].Start > r.Start || freed[i-1].End() == r.Start) {
			h.fail("%s returned unsorted or uncoalesced ranges: %v", op, freed)
		}
		for d := r.Start; d < r.End(); d++ {
			got[d]++
		}
	}
	if !maps.Equal(got, want) {
		h.fail("%s freed %v (%d blocks), want %v", op, freed, len(got), want)
	}
}

// checkRemappings checks that remaps, from MarkDurable or Unconvert, pair
// exactly the new and old blocks of want (new block -> old block and its
// record's state), with no new block twice. It wants nil if want is empty.
func (h *harness) checkRemappings(op string, remaps []Remapping, want map[uint64]remapWant) {
	if len(want) == 0 && remaps != nil {
		h.fail("%s returned %v, want nil", op, remaps)
	}
	got := map[uint64]remapWant{}
	for _, r := range remaps {
		if r.New.Len == 0 || r.Old.Len != r.New.Len {
			h.fail("%s returned a malformed remapping %v: %v", op, r, remaps)
		}
		for i := range r.New.Len {
			if _, dup := got[r.New.Start+i]; dup {
				h.fail("%s returned new block %d twice: %v", op, r.New.Start+i, remaps)
			}
			got[r.New.Start+i] = remapWant{old: r.Old.Start + i, oldUnwritten: r.OldUnwritten}
		}
	}
	if !maps.Equal(got, want) {
		h.fail("%s returned remappings %v, want (new: {old, oldUnwritten}) %v", op, remaps, want)
	}
}

// verify checks the map against the model and the record mirror.
func (h *harness) verify() {
	h.t.Helper()
	m := h.m
	if err := m.Check(); err != nil {
		h.fail("Check: %v", err)
	}
	// Extents, expanded, equal the model block by block, epochs and remaps
	// included. Only durable written blocks share a device block, a
	// remap's old blocks (which its record names) are not those of an
	// unwritten extent or a pending conversion (which its record names,
	// Unwritten), and the old blocks of a remap of a pending conversion
	// (which its record names, Unwritten) are no other block's, old or
	// new: so the records, which the mirror shows equal the persisted
	// forms, would load after a crash. devs counts the mappings of each
	// device block, a durable written one as 1, any other as exclusive;
	// olds counts the remaps whose record names each device block.
	const exclusive = 1 << 32
	exts := m.Extents()
	var blocks uint64
	pending := false
	got := make([]block, len(h.model))
	devs := make(map[uint64]int, len(h.used))
	olds := map[uint64]int{}
	for _, e := range exts {
		if e.End() > uint64(len(h.model)) {
			h.fail("extent %v past the model's %d blocks", e, len(h.model))
		}
		for i := range e.Len {
			x := block{mapped: true, dev: e.DevBlock + i, state: e.State, epoch: e.Epoch, remapped: e.Remapped, oldUnwritten: e.OldUnwritten}
			if e.Remapped {
				x.old = e.OldDevBlock + i
				olds[x.old]++
			}
			got[e.FileBlock+i] = x
			if x.durable() {
				devs[x.dev]++
			} else {
				devs[x.dev] += exclusive
			}
		}
		blocks += e.Len
		pending = pending || e.Epoch > 0
	}
	for i, x := range got {
		if x != h.model[i] {
			h.fail("block %d: map has %+v, model %+v", i, x, h.model[i])
		}
		if x.mapped && !x.durable() && devs[x.dev] != exclusive {
			h.fail("device block %d mapped twice, once by %+v, which is not durable written", x.dev, x)
		}
		if x.remapped && devs[x.old] >= exclusive {
			h.fail("block %d: old device block %d of %+v mapped by an unwritten or pending block", i, x.old, x)
		}
		if x.oldUnwritten && (devs[x.old] != 0 || olds[x.old] != 1) {
			h.fail("block %d: old device block %d of %+v, a pending conversion's, mapped %d times, named by %d remaps",
				i, x.old, x, devs[x.old], olds[x.old])
		}
	}
	if len(h.history)%32 == 0 {
		// The harness's own reference counts, now and then.
		refs := make(map[uint64]int, len(h.used))
		for _, x := range got {
			if x.mapped {
				refs[x.dev]++
			}
			if x.remapped {
				refs[x.old]++
			}
		}
		if !maps.Equal(refs, h.used) {
			h.fail("device block references %v, model %v", refs, h.used)
		}
	}
	if m.Blocks() != blocks || m.Len() != len(exts) || m.Pending() != pending {
		h.fail("Blocks %d Len %d Pending %v, want %d %d %v", m.Blocks(), m.Len(), m.Pending(), blocks, len(exts), pending)
	}
	// The record mirror.
	want := make(map[uint64]meta.Extent, len(exts))
	for _, e := range exts {
		want[e.FileBlock] = e.Persisted()
	}
	if !maps.Equal(h.mirror, want) {
		h.fail("record mirror differs:\nreplayed %v\nwant     %v", sortedRecords(h.mirror), sortedRecords(want))
	}
	// Lookups over random ranges, and over everything.
	for i := range 4 {
		fb, n := h.pickRange()
		if i == 0 {
			fb, n = 0, uint64(len(h.model))+2
		}
		h.checkLookup(fb, n)
	}
	// Seek and last-block queries.
	for range 3 {
		fb := uint64(h.src.intn(len(h.model) + 2))
		wantData, wantOK := uint64(0), false
		for b := fb; b < uint64(len(h.model)); b++ {
			if h.model[b].mapped {
				wantData, wantOK = b, true
				break
			}
		}
		if d, ok := m.NextData(fb); d != wantData || ok != wantOK {
			h.fail("NextData(%d) = %d, %v; want %d, %v", fb, d, ok, wantData, wantOK)
		}
		wantHole := fb
		for wantHole < uint64(len(h.model)) && h.model[wantHole].mapped {
			wantHole++
		}
		if got := m.NextHole(fb); got != wantHole {
			h.fail("NextHole(%d) = %d, want %d", fb, got, wantHole)
		}
		x, ok := m.At(fb)
		if ok != h.at(fb).mapped || (ok && (x.DevBlock+(fb-x.FileBlock) != h.at(fb).dev || fb < x.FileBlock || fb >= x.End())) {
			h.fail("At(%d) = %v, %v; model %+v", fb, x, ok, h.at(fb))
		}
	}
	lastAll, lastW := uint64(0), uint64(0)
	for b, x := range h.model {
		if x.mapped {
			lastAll = uint64(b) + 1
			if x.state == meta.Written {
				lastW = uint64(b) + 1
			}
		}
	}
	if end, ok := m.LastBlock(); end != lastAll || ok != (lastAll > 0) {
		h.fail("LastBlock = %d, %v; want %d", end, ok, lastAll)
	}
	if end, ok := m.LastWritten(); end != lastW || ok != (lastW > 0) {
		h.fail("LastWritten = %d, %v; want %d", end, ok, lastW)
	}
}

func (h *harness) checkLookup(fb, n uint64) {
	h.t.Helper()
	prefix := Segment{FileBlock: 12345, Len: 1}
	h.segs = append(h.segs[:0], prefix)
	segs := h.m.Lookup(fb, n, h.segs)
	h.segs = segs
	if segs[0] != prefix {
		h.fail("Lookup overwrote out[0]")
	}
	segs = segs[1:]
	hi := rangeEnd(fb, n)
	if hi > fb && h.m.smallSet {
		// The flat index and the B-tree agree.
		if tree := h.m.lookupTree(fb, hi, nil); !slices.Equal(tree, segs) {
			h.fail("Lookup(%d, %d) = %+v from the flat index, %+v from the B-tree", fb, n, segs, tree)
		}
	}
	cur := fb
	for i, s := range segs {
		if s.FileBlock != cur || s.Len == 0 || s.End() > hi || s.End() < s.FileBlock {
			h.fail("Lookup(%d, %d) segment %d %+v does not continue at %d: %+v", fb, n, i, s, cur, segs)
		}
		if s.Hole && i > 0 && segs[i-1].Hole {
			h.fail("Lookup(%d, %d): two holes in a row: %+v", fb, n, segs)
		}
		if s.Hole && (s.DevBlock != 0 || s.State != 0) {
			h.fail("Lookup(%d, %d): hole with a device block or state: %+v", fb, n, s)
		}
		if !s.Hole {
			// A mapped segment lies inside one extent.
			e, ok := h.m.At(s.FileBlock)
			if !ok || s.End() > e.End() {
				h.fail("Lookup(%d, %d): segment %+v not inside one extent (%v)", fb, n, s, e)
			}
		}
		// Compare with the model, block by block, inside the model.
		for b := s.FileBlock; b < min(s.End(), uint64(len(h.model))); b++ {
			x := h.model[b]
			if x.mapped == s.Hole || (x.mapped && (x.dev != s.DevBlock+(b-s.FileBlock) || x.state != s.State)) {
				h.fail("Lookup(%d, %d): block %d is %+v in %+v; model %+v", fb, n, b, s, segs, x)
			}
		}
		if !s.Hole && s.End() > uint64(len(h.model)) {
			h.fail("Lookup(%d, %d): mapped segment %+v past the model", fb, n, s)
		}
		cur = s.End()
	}
	if cur != hi {
		h.fail("Lookup(%d, %d) covers up to %d, want %d: %+v", fb, n, cur, hi, segs)
	}
}

func sortedRecords(r map[uint64]meta.Extent) []meta.Extent {
	out := slices.Collect(maps.Values(r))
	slices.SortFunc(out, func(a, b meta.Extent) int { return cmpUint64(a.FileBlock, b.FileBlock) })
	return out
}
