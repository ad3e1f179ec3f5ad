package ring

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
)

// The random-operation model test: a seeded sequence of operations on a
// few files, each open both O_DIRECT and buffered, is driven through the
// ring at depth 32, and then through the synchronous API on a fresh file
// system; both runs must end in the same state, and every read of either
// must agree with a trivial in-memory model.
//
// Operations that may run at once never conflict (the test waits for a
// conflicting one to complete before it submits the next): reads and
// writes conflict when a write overlaps the read, or could move the size
// under it; truncate, fallocate and appends conflict with everything on
// their file. Non-conflicting operations commute, so the model applies
// each at its completion, and the synchronous run replays the ring run's
// operations in submission order. A caller-NOWAIT write that got EAGAIN
// must have had no effect, and one that stopped short wrote exactly its
// count; the synchronous run replays that.
//
// CI runs fixed seeds; -ring.seed=N runs seed N instead, and
// -ring.seed=-1 a time-based one (add -v to see the operations).

var modelSeed = flag.Int64("ring.seed", 0, "seed for TestRingModel (0: the fixed seeds; -1: time-based)")

const (
	modelFiles   = 3
	modelSpan    = 96 << 10 // offsets fall in [0, modelSpan)
	modelOps     = 400
	modelDepth   = 32
	modelMaxSize = modelSpan + 16<<10
)

type mop struct {
	tag    uint64
	op     Op
	file   int
	direct bool
	off    int64
	len    int64
	mode   uint32
	flags  sluice.RWFlags
	data   []byte // write data
	// results of the ring run
	res int
	err error
}

func (o *mop) String() string {
	h := "buf"
	if o.direct {
		h = "dio"
	}
	return fmt.Sprintf("#%d %v f%d/%s off=%d len=%d mode=%#x flags=%#x", o.tag, o.op, o.file, h, o.off, o.len, o.mode, o.flags)
}

// barrier reports whether o conflicts with every operation on its file.
func (o *mop) barrier() bool {
	return o.op == OpTruncate || o.op == OpFallocate || o.op == OpWrite && o.flags&sluice.RWFAppend != 0
}

// conflicts reports whether a and b may not run at once.
func conflicts(a, b *mop) bool {
	if a.file != b.file {
		return false
	}
	if a.barrier() || b.barrier() {
		return true
	}
	isRW := func(o *mop) bool { return o.op == OpRead || o.op == OpWrite }
	if !isRW(a) || !isRW(b) || a.op == OpRead && b.op == OpRead {
		return false
	}
	if a.op == OpRead {
		a, b = b, a
	}
	// a is a write.
	if b.op == OpRead {
		return a.off+a.len > b.off // overlaps the read or may move EOF past it
	}
	return a.off < b.off+b.len && b.off < a.off+a.len
}

// model is the expected content of each file.
type model struct{ files [modelFiles][]byte }

func (m *model) apply(o *mop, res int) {
	f := m.files[o.file]
	grow := func(n int64) {
		if n > int64(len(f)) {
			f = append(f, make([]byte, n-int64(len(f)))...)
		}
	}
	switch o.op {
	case OpWrite:
		// res bytes were written (a NOWAIT write may stop short).
		off := o.off
		if o.flags&sluice.RWFAppend != 0 {
			off = int64(len(f))
		}
		grow(off + int64(res))
		copy(f[off:], o.data[:res])
	case OpTruncate:
		if o.off < int64(len(f)) {
			f = f[:o.off]
		} else {
			grow(o.off)
		}
	case OpFallocate:
		end := o.off + o.len
		switch {
		case o.mode&sluice.FallocPunchHole != 0:
			clear(f[min(o.off, int64(len(f))):min(end, int64(len(f)))])
		case o.mode&sluice.FallocZeroRange != 0:
			clear(f[min(o.off, int64(len(f))):min(end, int64(len(f)))])
			if o.mode&sluice.FallocKeepSize == 0 {
				grow(end)
			}
		case o.mode&sluice.FallocKeepSize == 0:
			grow(end)
		}
	}
	m.files[o.file] = f
}

// expect returns what a read of o finds in the model.
func (m *model) expect(o *mop) []byte {
	f := m.files[o.file]
	if o.off >= int64(len(f)) {
		return nil
	}
	return f[o.off:min(o.off+o.len, int64(len(f)))]
}

func genOps(rng *rand.Rand) []*mop {
	ops := make([]*mop, 0, modelOps)
	for i := 0; i < modelOps; i++ {
		o := &mop{tag: uint64(i), file: rng.IntN(modelFiles), direct: rng.IntN(2) == 0}
		unit := int64(1)
		if o.direct {
			unit = 512
		}
		o.off = rng.Int64N(modelSpan/unit) * unit
		o.len = (1 + rng.Int64N(12<<10/unit)) * unit
		switch k := rng.IntN(100); {
		case k < 40:
			o.op = OpRead
			if rng.IntN(10) == 0 {
				o.flags |= sluice.RWFNoWait
			}
		case k < 78:
			o.op = OpWrite
			switch rng.IntN(10) {
			case 0:
				o.flags |= sluice.RWFDsync
			case 1:
				o.flags |= sluice.RWFNoWait
			case 2:
				if !o.direct {
					o.flags |= sluice.RWFAppend
				}
			}
			o.data = device.AlignedBuf(int(o.len))
			for j := range o.data {
				o.data[j] = byte(rng.Uint32())
			}
		case k < 86:
			o.op = OpTruncate
			o.off = rng.Int64N(modelMaxSize)
			o.len = 0
		case k < 94:
			o.op = OpFallocate
			o.mode = []uint32{0, sluice.FallocKeepSize, sluice.FallocKeepSize | sluice.FallocPunchHole,
				sluice.FallocZeroRange, sluice.FallocZeroRange | sluice.FallocKeepSize}[rng.IntN(5)]
		case k < 97:
			o.op = OpFsync
		default:
			o.op = OpFdatasync
		}
		ops = append(ops, o)
	}
	return ops
}

// modelEnv opens the model's files, each with a direct and a buffered
// handle.
func modelEnv(t *testing.T, pol sluice.Policy) (*env, [modelFiles][2]*sluice.File) {
	// Background writeback and syncs often, to run alongside the ring.
	e := newEnvOpts(t, sluice.Options{Policy: &pol, WritebackAge: 20 * time.Millisecond, SyncInterval: 50 * time.Millisecond})
	var files [modelFiles][2]*sluice.File
	for i := range files {
		p := fmt.Sprintf("/m%d", i)
		files[i][0] = e.open(p, 0)
		files[i][1] = e.open(p, sluice.O_DIRECT)
	}
	return e, files
}

func handle(files [modelFiles][2]*sluice.File, o *mop) *sluice.File {
	if o.direct {
		return files[o.file][1]
	}
	return files[o.file][0]
}

func (o *mop) sqe(f *sluice.File) SQE {
	s := SQE{Op: o.op, File: f, Off: o.off, Len: o.len, Mode: o.mode, Flags: o.flags, Tag: o.tag, Buf: o.data}
	if o.op == OpRead {
		s.Buf = device.AlignedBuf(int(o.len))
	}
	return s
}

// checkRead checks a read's result against the model: exact for direct
// reads; a buffered read may stop early (a partial count, see CQE.Res).
func checkRead(t *testing.T, o *mop, buf []byte, n int, err error, want []byte) {
	t.Helper()
	if err != nil {
		if o.flags&sluice.RWFNoWait != 0 && errors.Is(err, syscall.EAGAIN) {
			return
		}
		t.Fatalf("%v: %v", o, err)
	}
	if n > len(want) || o.direct && n != len(want) || n == 0 && len(want) > 0 && o.flags&sluice.RWFNoWait == 0 {
		t.Fatalf("%v: read %d bytes, model has %d", o, n, len(want))
	}
	if !bytes.Equal(buf[:n], want[:n]) {
		t.Log(staleSource(o, buf[:n], want[:n]))
	}
	checkBytes(t, o.String(), buf[:n], want[:n])
}

// allOps is the sequence the model test runs, for staleSource.
var allOps []*mop

// staleSource says which earlier write, if any, the wrong bytes of a read
// came from.
func staleSource(o *mop, got, want []byte) string {
	first, last := -1, -1
	for i := range got {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	lo, hi := o.off+int64(first), o.off+int64(last)+1
	var out []string
	for _, w := range allOps {
		if w.tag >= o.tag || w.file != o.file || w.op != OpWrite || w.flags&sluice.RWFAppend != 0 {
			continue
		}
		if w.off <= lo && hi <= w.off+int64(len(w.data)) && bytes.Equal(w.data[lo-w.off:hi-w.off], got[first:last+1]) {
			out = append(out, fmt.Sprintf("#%d", w.tag))
		}
	}
	if len(out) == 0 {
		return fmt.Sprintf("wrong bytes at file [%d, %d) match no earlier write", lo, hi)
	}
	return fmt.Sprintf("wrong bytes at file [%d, %d) are those of write %v", lo, hi, out)
}

func TestRingModel(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	switch *modelSeed {
	case 0:
	case -1:
		seeds = []uint64{uint64(time.Now().UnixNano())}
	default:
		seeds = []uint64{uint64(*modelSeed)}
	}
	for _, seed := range seeds {
		for _, pol := range []sluice.Policy{sluice.Concurrent(), sluice.Classic()} {
			for _, force := range []bool{false, true} {
				name := fmt.Sprintf("seed=%d/%s/force_async=%t", seed, pol, force)
				t.Run(name, func(t *testing.T) {
					runModel(t, seed, pol, force)
				})
			}
		}
	}
}

func runModel(t *testing.T, seed uint64, pol sluice.Policy, force bool) {
	t.Logf("seed %d (replay with -ring.seed=%d)", seed, seed)
	ops := genOps(rand.New(rand.NewPCG(seed, 1)))
	allOps = ops
	ringState := runModelRing(t, pol, force, ops)
	syncState := runModelSync(t, pol, ops)
	for i := range ringState {
		checkBytes(t, fmt.Sprintf("file %d: ring run vs synchronous run", i), ringState[i], syncState[i])
	}
}

// runModelRing drives ops through a ring at depth 32 and returns the final
// content of each file.
func runModelRing(t *testing.T, pol sluice.Policy, force bool, ops []*mop) [modelFiles][]byte {
	e, files := modelEnv(t, pol)
	r := e.ring(modelDepth, &Options{ForceAsync: force})
	var m model
	inflight := map[uint64]*mop{}
	bufs := map[uint64][]byte{}
	cqes := make([]CQE, modelDepth)
	process := func(c CQE) {
		o := inflight[c.Tag]
		delete(inflight, c.Tag)
		o.res, o.err = c.Res, c.Err
		switch {
		case o.op == OpRead:
			checkRead(t, o, bufs[o.tag], c.Res, c.Err, m.expect(o))
			delete(bufs, o.tag)
		case c.Err == nil:
			if o.op == OpWrite && c.Res != len(o.data) && (o.flags&sluice.RWFNoWait == 0 || c.Res == 0) {
				t.Fatalf("%v: wrote %d", o, c.Res)
			}
			m.apply(o, c.Res)
		case o.flags&sluice.RWFNoWait != 0 && errors.Is(c.Err, syscall.EAGAIN):
			// No effect.
		default:
			t.Fatalf("%v: %v", o, c.Err)
		}
	}
	reapSome := func(min int) {
		n, err := r.WaitTimeout(min, 10*time.Second, cqes)
		if err != nil {
			t.Fatalf("reaping: %v (%d in flight: %v)", err, len(inflight), r.Stats())
		}
		for _, c := range cqes[:n] {
			process(c)
		}
	}
	for _, o := range ops {
		for {
			busy := len(inflight) == modelDepth
			for _, x := range inflight {
				busy = busy || conflicts(o, x)
			}
			if !busy {
				break
			}
			reapSome(1)
		}
		// A read's expected bytes are fixed now: nothing in flight can
		// change them.
		s := o.sqe(handle(files, o))
		if o.op == OpRead {
			bufs[o.tag] = s.Buf
		}
		inflight[o.tag] = o
		if testing.Verbose() {
			t.Logf("submit %v", o)
		}
		if err := r.Submit(s); err != nil {
			t.Fatalf("%v: Submit: %v", o, err)
		}
	}
	for len(inflight) > 0 {
		reapSome(1)
	}
	t.Logf("ring: %v", r.Stats())
	return finalState(t, e, files, &m)
}

// runModelSync replays the ring run's operations that took effect
// through the synchronous API on a fresh file system.
func runModelSync(t *testing.T, pol sluice.Policy, ops []*mop) [modelFiles][]byte {
	e, files := modelEnv(t, pol)
	var m model
	for _, o := range ops {
		if o.err != nil && o.op != OpRead {
			continue // NOWAIT EAGAIN: no effect in the ring run
		}
		f := handle(files, o)
		var err error
		switch o.op {
		case OpRead:
			buf := device.AlignedBuf(int(o.len))
			var n int
			n, err = f.Pread(buf, o.off, o.flags&^sluice.RWFNoWait)
			checkRead(t, o, buf, n, err, m.expect(o))
			continue
		case OpWrite:
			_, err = f.Pwrite(o.data[:o.res], o.off, o.flags&^sluice.RWFNoWait)
		case OpTruncate:
			err = f.Truncate(o.off)
		case OpFallocate:
			err = f.Fallocate(o.mode, o.off, o.len)
		case OpFsync:
			err = f.Fsync()
		case OpFdatasync:
			err = f.Fdatasync()
		}
		if err != nil {
			t.Fatalf("sync %v: %v", o, err)
		}
		m.apply(o, o.res)
	}
	return finalState(t, e, files, &m)
}

// finalState reads every file back, checks it against the model and the
// file system's consistency, and returns the contents.
func finalState(t *testing.T, e *env, files [modelFiles][2]*sluice.File, m *model) [modelFiles][]byte {
	var out [modelFiles][]byte
	for i := range files {
		a, err := files[i][0].Stat()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, a.Size)
		if n, err := files[i][0].Pread(buf, 0, 0); err != nil || int64(n) != a.Size {
			t.Fatalf("file %d: read back %d of %d: %v", i, n, a.Size, err)
		}
		checkBytes(t, fmt.Sprintf("file %d vs model", i), buf, m.files[i])
		out[i] = buf
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	rep, err := e.fs.Check()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("Check: %v", rep.Problems)
	}
	return out
}
