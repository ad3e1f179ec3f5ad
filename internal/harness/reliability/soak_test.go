package reliability

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
)

// Part 6: a concurrency soak. Goroutines run mixed operations on a few
// shared files and directories for a bounded time (-soak, 20s by default,
// 3s with -short); the final state is checked against models:
//
//   - "owned" files: each goroutine owns a disjoint 64 KiB block range of
//     each and keeps an exact model of it; it writes (buffered and
//     direct, at any byte offset), punches, zeroes, preallocates and
//     reads back (through both paths) and checks each read against its
//     model as it goes; at the end every range must equal its model;
//   - "chaos" files: every goroutine writes, truncates, fallocates and
//     reads anywhere, in whole 512 B sectors, each sector written carrying
//     a tag (file, write number, offset); every sector ever read must be
//     zero or a well-formed tag of that file and that offset;
//   - a namespace: renames (also RENAME_EXCHANGE), links of the shared
//     files, unlinks, creates, mkdirs, rmdirs, xattrs, in a few
//     directories; each call succeeds or fails with an errno that the
//     race explains.
//
// Then Check must be clean, and again after a crash image taken after
// SyncAll, where the files must read back as they did.

var (
	soakTime    = flag.Duration("soak", 20*time.Second, "how long TestSoak runs (3s with -short)")
	soakWorkers = flag.Int("soak-workers", 8, "TestSoak's goroutines")
	soakSeed    = flag.Uint64("soak-seed", 0, "TestSoak's seed (0: from the clock; logged)")
	soakTrace   = flag.Bool("soak-trace", false, "log every owned-file operation of TestSoak")
	soakKinds   = flag.String("soak-kinds", "", "TestSoak: only these operation kinds, e.g. 0,1,2,4 (0-5 owned files, 6-10 chaos files, 11-15 namespace); for narrowing a failure down")
	soakModes   = flag.String("soak-modes", "", "TestSoak: only these owned-file fallocate modes (punch, zero, keep)")
)

const (
	soakOwnedBytes = 64 << 10 // per worker per owned file
	soakChaosBytes = 256 << 10
	tagMagic       = 0x736c74616773616b // "sltagsak"
)

// tagSector fills p (512 B) with the tag of a write of file at off, number
// seq: a header and a filler derived from it.
func tagSector(p []byte, file, seq uint64, off int64) {
	binary.LittleEndian.PutUint64(p, tagMagic)
	binary.LittleEndian.PutUint64(p[8:], file)
	binary.LittleEndian.PutUint64(p[16:], seq)
	binary.LittleEndian.PutUint64(p[24:], uint64(off))
	x := file*0x9e3779b97f4a7c15 ^ seq*0xbf58476d1ce4e5b9 ^ uint64(off)
	for i := 32; i < 512; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(p[i:], x)
	}
}

// checkSector returns "" if p (512 B, read at off of file) is all zeros or
// a well-formed tag of file at off written by a write numbered <= maxSeq.
func checkSector(p []byte, file uint64, off int64, maxSeq uint64) string {
	if binary.LittleEndian.Uint64(p) != tagMagic {
		for _, b := range p {
			if b != 0 {
				return fmt.Sprintf("sector at %d is neither zero nor a tag", off)
			}
		}
		return ""
	}
	f, seq, o := binary.LittleEndian.Uint64(p[8:]), binary.LittleEndian.Uint64(p[16:]), int64(binary.LittleEndian.Uint64(p[24:]))
	var want [512]byte
	tagSector(want[:], f, seq, o)
	switch {
	case !bytes.Equal(p, want[:]):
		return fmt.Sprintf("sector at %d: torn or corrupted tag (file %d, write %d, offset %d)", off, f, seq, o)
	case f != file || o != off:
		return fmt.Sprintf("sector at %d holds the tag of file %d offset %d (write %d)", off, f, o, seq)
	case seq > maxSeq:
		return fmt.Sprintf("sector at %d holds write %d, but only %d were issued", off, seq, maxSeq)
	}
	return ""
}

// soakFile is a shared file with one buffered and one direct handle.
type soakFile struct {
	name             string
	id               uint64
	buffered, direct *sluice.File
}

type soak struct {
	t      *testing.T
	e      *env
	owned  []*soakFile
	chaos  []*soakFile
	seq    atomic.Uint64 // chaos write numbers
	stop   atomic.Bool
	failed atomic.Bool
	seed   uint64
	ops    [][16]atomic.Int64
	// dataErrs are the wrong reads workers saw. Protected by dataMu.
	dataMu   sync.Mutex
	dataErrs []string
	// hist holds each worker's recent owned-file operations. Each
	// worker touches only its own.
	hist []struct {
		ops [40]string
		n   int
	}
	// writes holds each worker's recent owned-file writes, to tell where
	// wrong bytes came from.
	writes  [][]soakWrite
	allowed sync.Map // errno -> count, for the log
}

func (s *soak) fail(format string, args ...any) {
	s.t.Helper()
	s.failed.Store(true)
	s.stop.Store(true)
	s.t.Errorf(format, args...)
}

// failData reports a worker that read back bytes other than those it
// wrote: it stops the soak, and TestSoak fails with every wrong read the
// workers saw once they have stopped, so that one report holds them all.
func (s *soak) failData(format string, args ...any) {
	s.dataMu.Lock()
	s.dataErrs = append(s.dataErrs, fmt.Sprintf(format, args...))
	s.dataMu.Unlock()
	s.failed.Store(true)
	s.stop.Store(true)
}

// TestSoak is the concurrency soak described above.
func TestSoak(t *testing.T) {
	d := *soakTime
	if testing.Short() && d > 3*time.Second {
		d = 3 * time.Second
	}
	e := newEnv(t, envConfig{size: 64 << 20, opts: sluice.Options{
		// Small enough that eviction, throttling and the flusher all run.
		CacheSizeBytes: 2 << 20, WritebackAge: 50 * time.Millisecond, SyncInterval: 200 * time.Millisecond,
	}})
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-soak-seed replays the operation choices, not the interleaving)", seed)
	nw := *soakWorkers
	s := &soak{t: t, e: e, seed: seed, ops: make([][16]atomic.Int64, nw)}
	s.hist = make([]struct {
		ops [40]string
		n   int
	}, nw)
	s.writes = make([][]soakWrite, nw)
	open := func(name string, id uint64) *soakFile {
		f := &soakFile{name: name, id: id}
		f.buffered = e.create(name, 0)
		f.direct = e.open(name, sluice.O_RDWR|sluice.O_DIRECT)
		return f
	}
	for i := range 2 {
		s.owned = append(s.owned, open(fmt.Sprintf("/owned%d", i), uint64(10+i)))
		s.chaos = append(s.chaos, open(fmt.Sprintf("/chaos%d", i), uint64(20+i)))
	}
	for d := range 4 {
		if err := e.fs.Mkdir(fmt.Sprintf("/ns%d", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	models := make([][][]byte, nw) // [worker][owned file] -> bytes written so far
	var wg sync.WaitGroup
	for w := range nw {
		models[w] = make([][]byte, len(s.owned))
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.worker(w, models[w])
		}()
	}
	time.AfterFunc(d, func() { s.stop.Store(true) })
	if !withTimeout(t, d+2*time.Minute, "the soak's workers", wg.Wait) {
		buf := make([]byte, 8<<20)
		n := runtime.Stack(buf, true)
		p := fmt.Sprintf("%s/soak-stacks.txt", os.TempDir())
		os.WriteFile(p, buf[:n], 0o644)
		t.Fatalf("workers stuck: goroutine stacks in %s", p)
	}
	var total [16]int64
	for w := range nw {
		for k := range total {
			total[k] += s.ops[w][k].Load()
		}
	}
	t.Logf("soak ran %v: ops by kind %v, %d chaos writes", d, total, s.seq.Load())
	s.allowed.Range(func(k, v any) bool { t.Logf("  expected errno %v: %d", k, v.(*atomic.Int64).Load()); return true })
	if len(s.dataErrs) > 0 {
		t.Logf("%s", strings.Join(s.dataErrs, "\n"))
		t.Errorf("%d workers read back wrong data", len(s.dataErrs))
	}
	if s.failed.Load() {
		return
	}

	// The final state, live.
	final := s.verifyFiles(models, "live")
	if err := e.fs.SyncAll(); err != nil {
		t.Fatalf("SyncAll: %v", err)
	}
	checkClean(t, e.fs)
	snap := snapshot(t, e.fs)
	// And after a crash: everything was synced, so it all survives.
	for seed := uint64(1); seed <= 1; seed++ {
		e2 := e.crash(seed)
		checkClean(t, e2.fs)
		for name, want := range final {
			got, err := readFile(e2.fs, name)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("crash %d: %s differs from before the crash (err %v, %d vs %d bytes)", seed, name, err, len(got), len(want))
			}
		}
		if d := snap.withoutTimes().diff(snapshot(t, e2.fs).withoutTimes()); d != "" {
			t.Errorf("crash %d: the tree differs: %s", seed, d)
		}
		e2.abandon()
	}
}

// verifyFiles checks the shared files against the models and returns
// their contents.
func (s *soak) verifyFiles(models [][][]byte, when string) map[string][]byte {
	t := s.t
	out := map[string][]byte{}
	var wrong []string
	defer func() {
		if len(wrong) > 0 {
			t.Logf("%s", strings.Join(wrong, "\n"))
			t.Errorf("%d owned ranges differ from their models", len(wrong))
		}
	}()
	for i, f := range s.owned {
		for _, h := range []*sluice.File{f.buffered, f.direct} {
			got, err := readAll(h)
			if err != nil {
				t.Fatalf("%s: reading %s: %v", when, f.name, err)
			}
			for w := range models {
				m := models[w][i]
				lo := int64(w) * soakOwnedBytes
				var part []byte
				if lo < int64(len(got)) {
					part = got[lo:min(int64(len(got)), lo+soakOwnedBytes)]
				}
				if len(part) < len(m) {
					t.Errorf("%s: %s: worker %d's range has %d bytes, its model %d", when, f.name, w, len(part), len(m))
					continue
				}
				if d := firstDiff(part[:len(m)], m); d >= 0 {
					wrong = append(wrong, fmt.Sprintf("%s: %s: worker %d's range differs from its model at byte %d", when, f.name, w, lo+int64(d)))
				}
				if !allZero(part[len(m):]) {
					wrong = append(wrong, fmt.Sprintf("%s: %s: worker %d's range has non-zero bytes past what it wrote", when, f.name, w))
				}
			}
			out[f.name] = got
		}
	}
	for _, f := range s.chaos {
		got, err := readAll(f.direct)
		if err != nil {
			t.Fatalf("%s: reading %s: %v", when, f.name, err)
		}
		if len(got)%512 != 0 {
			t.Errorf("%s: %s has size %d, not whole sectors", when, f.name, len(got))
		}
		for off := 0; off+512 <= len(got); off += 512 {
			if d := checkSector(got[off:off+512], f.id, int64(off), s.seq.Load()); d != "" {
				t.Errorf("%s: %s: %s", when, f.name, d)
				break
			}
		}
		if b, err := readAll(f.buffered); err != nil || !bytes.Equal(b, got) {
			t.Errorf("%s: %s reads differently through the cache (err %v)", when, f.name, err)
		}
		out[f.name] = got
	}
	return out
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func allZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

// expect accepts err if it is nil or carries one of the errnos the race
// explains, and fails the soak otherwise.
func (s *soak) expect(what string, err error, ok ...syscall.Errno) {
	if err == nil {
		return
	}
	errno := errnoOf(err)
	for _, o := range ok {
		if errno == o {
			v, _ := s.allowed.LoadOrStore(what+": "+errno.Error(), new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			return
		}
	}
	s.fail("%s: %v (errno %d)", what, err, int(errno))
}

func (s *soak) worker(w int, model [][]byte) {
	rng := rand.New(rand.NewPCG(s.seed, uint64(w)))
	var kinds []int
	for _, f := range strings.Split(*soakKinds, ",") {
		var k int
		if _, err := fmt.Sscan(f, &k); err == nil {
			kinds = append(kinds, k)
		}
	}
	for !s.stop.Load() {
		k := rng.IntN(16)
		if len(kinds) > 0 {
			k = kinds[rng.IntN(len(kinds))]
		}
		s.ops[w][k].Add(1)
		switch {
		case k < 6:
			s.ownedOp(w, rng, model, k)
		case k < 11:
			s.chaosOp(rng, k)
		default:
			s.namespaceOp(rng)
		}
	}
}

func sizeOf(f *sluice.File) int64 {
	a, _ := f.Stat()
	return a.Size
}

type soakWrite struct {
	op   int // s.hist index
	file string
	off  int64
	data []byte
}

// whodunit says which of worker w's recent writes to file wrote got at
// off, if any.
func (s *soak) whodunit(w int, file string, got []byte, off int64) string {
	ws := s.writes[w]
	for i := len(ws) - 1; i >= 0; i-- {
		x := ws[i]
		if x.file != file || off < x.off || off+int64(len(got)) > x.off+int64(len(x.data)) {
			continue
		}
		if bytes.Equal(x.data[off-x.off:off-x.off+int64(len(got))], got) {
			return fmt.Sprintf("the wrong bytes are those of the worker's operation %d back (%d writes back)", s.hist[w].n-x.op, len(ws)-i)
		}
	}
	return "the wrong bytes match none of the worker's last writes"
}

// note records an operation of worker w for the failure report.
func (s *soak) note(w int, format string, args ...any) {
	h := &s.hist[w]
	h.ops[h.n%len(h.ops)] = fmt.Sprintf(format, args...)
	h.n++
	if *soakTrace {
		s.t.Logf("worker %d: %s", w, h.ops[(h.n-1)%len(h.ops)])
	}
}

// history returns the last operations of worker w, oldest first.
func (s *soak) history(w int) string {
	h := &s.hist[w]
	var out []string
	for i := max(0, h.n-len(h.ops)); i < h.n; i++ {
		out = append(out, "  "+h.ops[i%len(h.ops)])
	}
	return strings.Join(out, "\n")
}

// ownedOp works on worker w's range of an owned file and checks reads
// against the model.
func (s *soak) ownedOp(w int, rng *rand.Rand, model [][]byte, k int) {
	i := rng.IntN(len(s.owned))
	f := s.owned[i]
	m := &model[i]
	base := int64(w) * soakOwnedBytes
	written := int64(len(*m))
	switch k {
	case 0, 1: // write, buffered or direct
		var off int64
		var n int
		h := f.buffered
		if k == 0 {
			off = rng.Int64N(soakOwnedBytes)
			n = 1 + rng.IntN(int(min(16<<10, soakOwnedBytes-off)))
		} else {
			h = f.direct
			off = rng.Int64N(soakOwnedBytes/512) * 512
			n = 512 * (1 + rng.IntN(int(min(32, (soakOwnedBytes-off)/512))))
		}
		p := pattern(n, rng.Uint64())
		s.note(w, "%s write [%d, %d) of %s", []string{"buffered", "direct"}[k], base+off, base+off+int64(n), f.name)
		s.writes[w] = append(s.writes[w], soakWrite{s.hist[w].n - 1, f.name, base + off, p})
		if len(s.writes[w]) > 300 {
			s.writes[w] = s.writes[w][1:]
		}
		if _, err := h.WriteAt(p, base+off); err != nil {
			s.fail("worker %d: write of %d at %d of %s: %v", w, n, base+off, f.name, err)
			return
		}
		if end := off + int64(n); end > written {
			*m = append(*m, make([]byte, end-written)...)
		}
		copy((*m)[off:], p)
	case 2, 3: // read back, buffered or direct
		if written == 0 {
			return
		}
		h := f.buffered
		off := rng.Int64N(written)
		n := 1 + rng.Int64N(written-off)
		if k == 3 {
			h = f.direct
			off, n = off/512*512, (n+511)/512*512
			if off+n > written/512*512 {
				n = written/512*512 - off
			}
			if n <= 0 {
				return
			}
		}
		buf := device.AlignedBuf(int(n))
		s.note(w, "%s read [%d, %d) of %s", []string{"buffered", "direct"}[k-2], base+off, base+off+n, f.name)
		got, err := h.ReadAt(buf, base+off)
		if err != nil {
			s.fail("worker %d: read of %d at %d of %s: %d, %v", w, n, base+off, f.name, got, err)
			return
		}
		if d := firstDiff(buf, (*m)[off:off+n]); d >= 0 {
			want := (*m)[off : off+n]
			e := d
			for e < len(buf) && buf[e] != want[e] {
				e++
			}
			s.failData("worker %d: %s read of %d at %d of %s differs from what the worker wrote at bytes [%d, %d) (got zeros: %v; %s; size now %d)\nrecent ops of the worker:\n%s",
				w, []string{"buffered", "direct"}[k-2], n, base+off, f.name, base+off+int64(d), base+off+int64(e), allZero(buf[d:e]),
				s.whodunit(w, f.name, buf[d:e], base+off+int64(d)), sizeOf(f.buffered), s.history(w))
		}
	case 4: // punch, zero or preallocate
		if written == 0 {
			return
		}
		off := rng.Int64N(written)
		n := 1 + rng.Int64N(written-off)
		modes := []uint32{sluice.FallocPunchHole | sluice.FallocKeepSize, sluice.FallocZeroRange | sluice.FallocKeepSize, sluice.FallocKeepSize}
		if *soakModes != "" {
			modes = modes[:0]
			for i, name := range []string{"punch", "zero", "keep"} {
				if strings.Contains(*soakModes, name) {
					modes = append(modes, []uint32{sluice.FallocPunchHole | sluice.FallocKeepSize, sluice.FallocZeroRange | sluice.FallocKeepSize, sluice.FallocKeepSize}[i])
				}
			}
		}
		mode := modes[rng.IntN(len(modes))]
		if mode == sluice.FallocKeepSize {
			off, n = 0, soakOwnedBytes
		}
		s.note(w, "fallocate %#x [%d, %d) of %s", mode, base+off, base+off+n, f.name)
		if err := f.buffered.Fallocate(mode, base+off, n); err != nil {
			s.fail("worker %d: fallocate %#x of %d at %d of %s: %v", w, mode, n, base+off, f.name, err)
			return
		}
		if mode != sluice.FallocKeepSize {
			clear((*m)[off : off+n])
		}
	case 5:
		h := f.buffered
		if rng.IntN(2) == 0 {
			h = f.direct
		}
		if err := h.Fsync(); err != nil {
			s.fail("worker %d: fsync %s: %v", w, f.name, err)
		}
	}
}

// chaosOp works anywhere in a chaos file, in whole tagged sectors.
func (s *soak) chaosOp(rng *rand.Rand, k int) {
	f := s.chaos[rng.IntN(len(s.chaos))]
	h := f.buffered
	if rng.IntN(2) == 0 {
		h = f.direct
	}
	const sectors = soakChaosBytes / 512
	switch k {
	case 6, 7: // tagged write
		off := rng.Int64N(sectors) * 512
		n := 1 + rng.IntN(int(min(24, sectors-off/512)))
		p := device.AlignedBuf(n * 512)
		for i := range n {
			tagSector(p[i*512:(i+1)*512], f.id, s.seq.Add(1), off+int64(i)*512)
		}
		if _, err := h.WriteAt(p, off); err != nil {
			s.fail("chaos write of %d at %d of %s: %v", len(p), off, f.name, err)
		}
	case 8: // read and check every sector
		off := rng.Int64N(sectors) * 512
		n := 512 * (1 + rng.IntN(64))
		buf := device.AlignedBuf(n)
		got, err := h.Pread(buf, off, 0)
		maxSeq := s.seq.Load() // every write the read can see was numbered by now
		if err != nil {
			s.fail("chaos read of %d at %d of %s: %v", n, off, f.name, err)
			return
		}
		if got%512 != 0 {
			s.fail("chaos read of %d at %d of %s returned %d bytes: the size is always whole sectors", n, off, f.name, got)
			return
		}
		for i := 0; i < got; i += 512 {
			if d := checkSector(buf[i:i+512], f.id, off+int64(i), maxSeq); d != "" {
				s.fail("chaos read of %s: %s", f.name, d)
				return
			}
		}
	case 9: // truncate or fallocate
		off := rng.Int64N(sectors) * 512
		var err error
		switch rng.IntN(5) {
		case 0:
			err = h.Truncate(off)
		default:
			n := 512 * (1 + rng.Int64N(min(128, sectors-off/512)))
			mode := []uint32{0, sluice.FallocKeepSize, sluice.FallocPunchHole | sluice.FallocKeepSize, sluice.FallocZeroRange}[rng.IntN(4)]
			err = h.Fallocate(mode, off, n)
		}
		if err != nil {
			s.fail("chaos truncate/fallocate of %s: %v", f.name, err)
		}
	case 10:
		if err := h.Fdatasync(); err != nil {
			s.fail("chaos fdatasync of %s: %v", f.name, err)
		}
	}
}

// namespaceOp changes the namespace under /ns0../ns3, racing the others.
func (s *soak) namespaceOp(rng *rand.Rand) {
	fs := s.e.fs
	name := func() string {
		d := rng.IntN(4)
		switch rng.IntN(4) {
		case 0:
			return fmt.Sprintf("/ns%d/sub%d", d, rng.IntN(3))
		case 1:
			return fmt.Sprintf("/ns%d/sub%d/n%d", d, rng.IntN(3), rng.IntN(4))
		}
		return fmt.Sprintf("/ns%d/n%d", d, rng.IntN(6))
	}
	shared := func() *soakFile {
		all := append(append([]*soakFile{}, s.owned...), s.chaos...)
		return all[rng.IntN(len(all))]
	}
	// Errnos a lost race explains.
	race := []syscall.Errno{syscall.ENOENT, syscall.EEXIST, syscall.ENOTEMPTY, syscall.EISDIR, syscall.ENOTDIR}
	switch rng.IntN(12) {
	case 0:
		// O_EXCL: the name may be a link to a shared file, whose bytes
		// belong to the models.
		f, err := fs.OpenFile(name(), sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL, 0o644)
		if err == nil {
			if _, werr := f.WriteAt([]byte("x"), rng.Int64N(8192)); werr != nil {
				s.fail("write to a new file: %v", werr)
			}
			f.Close()
		}
		s.expect("create", err, append(race, syscall.EISDIR)...)
	case 1:
		s.expect("mkdir", fs.Mkdir(name(), 0o755), race...)
	case 2, 3:
		flags := uint32(0)
		if rng.IntN(4) == 0 {
			flags = sluice.RenameExchange
		}
		// EINVAL: a directory into its own subtree.
		s.expect("rename", fs.Rename(name(), name(), flags), append(race, syscall.EINVAL, syscall.EBUSY)...)
	case 4:
		s.expect("link", fs.Link(shared().name, name()), race...)
	case 5:
		s.expect("link of a name", fs.Link(name(), name()), append(race, syscall.EPERM)...)
	case 6, 7:
		s.expect("unlink", fs.Unlink(name()), race...)
	case 8:
		s.expect("rmdir", fs.Rmdir(name()), race...)
	case 9:
		p := shared().name
		if rng.IntN(2) == 0 {
			s.expect("setxattr", fs.Setxattr(p, fmt.Sprintf("user.x%d", rng.IntN(3)), pattern(rng.IntN(200), rng.Uint64()), 0))
		} else {
			s.expect("removexattr", fs.Removexattr(p, fmt.Sprintf("user.x%d", rng.IntN(3))), syscall.ENODATA)
		}
	case 10:
		_, err := fs.ReadDir(fmt.Sprintf("/ns%d", rng.IntN(4)))
		s.expect("readdir", err)
		_, err = fs.Stat(name())
		s.expect("stat", err, syscall.ENOENT, syscall.ENOTDIR)
	case 11:
		// Open a shared file by one of its links, read, close.
		f, err := fs.OpenFile(name(), sluice.O_RDONLY, 0)
		if err == nil {
			_, rerr := f.ReadAt(make([]byte, 4096), 0)
			if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, syscall.EISDIR) {
				s.fail("read through a link: %v", rerr)
			}
			f.Close()
		}
		s.expect("open", err, race...)
	}
}
