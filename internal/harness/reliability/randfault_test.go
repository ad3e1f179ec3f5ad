package reliability

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
)

// fileModel is what a file must hold, byte by byte, with the uncertainty
// failed calls leave: after a failed write each byte of its range is the
// old or the new byte (the device contract), after a failed punch it is
// the old byte or zero.
type fileModel struct {
	data []byte // the expected byte (its length is the size)
	alt  []byte // the other acceptable byte where unc == either
	unc  []uint8
	// synced is the content as of the last successful fsync, valid while
	// clean (nothing changed, or failed to change, since).
	synced *fileModel
	clean  bool
}

const (
	exact uint8 = iota
	either
	anyByte
)

func (m *fileModel) size() int64 { return int64(len(m.data)) }

func (m *fileModel) resize(n int64) {
	for int64(len(m.data)) < n {
		m.data = append(m.data, 0)
		m.alt = append(m.alt, 0)
		m.unc = append(m.unc, exact)
	}
	m.data, m.alt, m.unc = m.data[:n], m.alt[:n], m.unc[:n]
}

// set records a successful write of p at off.
func (m *fileModel) set(p []byte, off int64) {
	if end := off + int64(len(p)); end > m.size() {
		m.resize(end)
	}
	copy(m.data[off:], p)
	for i := range p {
		m.unc[off+int64(i)] = exact
	}
}

// maybe records that bytes [off, off+len(p)) below EOF may now hold p's
// bytes instead of their old ones.
func (m *fileModel) maybe(p []byte, off int64) {
	for i := range p {
		j := off + int64(i)
		if j >= m.size() {
			break
		}
		switch {
		case m.unc[j] == exact && m.data[j] != p[i]:
			m.unc[j], m.alt[j] = either, p[i]
		case m.unc[j] == either && m.alt[j] != p[i] && m.data[j] != p[i]:
			m.unc[j] = anyByte
		}
	}
}

func (m *fileModel) clone() *fileModel {
	return &fileModel{data: append([]byte(nil), m.data...), alt: append([]byte(nil), m.alt...), unc: append([]uint8(nil), m.unc...)}
}

// check compares got, read at off, with the model; it returns "" or what
// differs.
func (m *fileModel) check(got []byte, off int64) string {
	for i, b := range got {
		j := off + int64(i)
		if j >= m.size() {
			return fmt.Sprintf("byte %d read past the size %d", j, m.size())
		}
		switch m.unc[j] {
		case exact:
			if b != m.data[j] {
				return fmt.Sprintf("byte %d is %#x, want %#x", j, b, m.data[j])
			}
		case either:
			if b != m.data[j] && b != m.alt[j] {
				return fmt.Sprintf("byte %d is %#x, want %#x or %#x", j, b, m.data[j], m.alt[j])
			}
		}
	}
	return ""
}

// TestDeviceFaultRandom runs a seeded single-threaded workload (direct and
// buffered reads and writes, truncates, fallocates, fsyncs) on three files
// while faultdev fails random reads, writes and flushes. Every call must
// succeed or fail with EIO (nothing else, no panic, no hang); every read
// that succeeds must return what a model of the file allows; after
// healing, the files read back as the model says; and after a crash, the
// volume is consistent and every file whose last fsync succeeded (with no
// change since) holds exactly its fsynced content.
func TestDeviceFaultRandom(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runRandomFaults(t, seed, 300) })
	}
}

func runRandomFaults(t *testing.T, seed uint64, nops int) {
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	e := newEnv(t, envConfig{})
	const nfiles = 3
	type file struct {
		direct, buffered *sluice.File
		m                *fileModel
	}
	files := make([]*file, nfiles)
	for i := range files {
		p := fmt.Sprintf("/f%d", i)
		d := e.create(p, sluice.O_DIRECT)
		b := e.open(p, sluice.O_RDWR)
		files[i] = &file{direct: d, buffered: b, m: &fileModel{clean: true, synced: &fileModel{}}}
	}
	// Odd seeds fail reads and writes only (long runs); even seeds fail
	// flushes too, which shuts the file system down (early end).
	prob := []float64{0.02, 0.05, 0.1}[seed%3]
	ops := faultdev.Reads | faultdev.Writes
	if seed%2 == 0 {
		ops = faultdev.AnyOp
	}
	inj := e.dev.Inject(faultdev.Randomly(ops, prob, seed))
	shutdown := false
	bad := func(what string, err error) bool {
		if err == nil {
			return false
		}
		if !isEIO(err) {
			t.Errorf("seed %d: %s: %v, want EIO", seed, what, err)
		}
		if errors.Is(err, sluice.ErrShutdown) {
			shutdown = true
		}
		return true
	}
	var counts [8]int
	for op := 0; op < nops && !shutdown && !t.Failed(); op++ {
		f := files[rng.IntN(nfiles)]
		m := f.m
		k := rng.IntN(8)
		counts[k]++
		switch k {
		case 0: // buffered write
			off := rng.Int64N(256 << 10)
			p := pattern(1+rng.IntN(20<<10), rng.Uint64())
			n, err := f.buffered.WriteAt(p, off)
			m.clean = false
			if !bad("buffered write", err) {
				m.set(p[:n], off)
			}
		case 1: // direct write
			off := rng.Int64N(512) * 512
			p := pattern(512*(1+rng.IntN(40)), rng.Uint64())
			n, err := f.direct.WriteAt(p, off)
			m.clean = false
			if bad("direct write", err) {
				m.maybe(p, off)
			} else {
				m.set(p[:n], off)
			}
		case 2, 3: // read
			h, what := f.buffered, "buffered read"
			off := rng.Int64N(m.size() + 1)
			n := 1 + rng.IntN(32<<10)
			if k == 3 {
				h, what = f.direct, "direct read"
				off, n = off/512*512, (n+511)/512*512
			}
			buf := device.AlignedBuf(n)
			got, err := h.Pread(buf, off, 0)
			if !bad(what, err) {
				// A short count is what pread(2) returns when an I/O
				// error follows some bytes copied.
				if want := min(int64(n), max(0, m.size()-off)); int64(got) > want || int64(got) < want && inj.Injected() == 0 {
					t.Errorf("seed %d op %d: %s of %d at %d: %d bytes, want %d", seed, op, what, n, off, got, want)
				} else if d := m.check(buf[:got], off); d != "" {
					t.Errorf("seed %d op %d: %s of %d at %d: %s", seed, op, what, n, off, d)
				}
			}
		case 4: // truncate
			size := rng.Int64N(300 << 10)
			err := f.buffered.Truncate(size)
			m.clean = false
			if bad("truncate", err) {
				if size < m.size() {
					// B6: a failed shrinking truncate may already have
					// dropped the cached bytes past the new size.
					for j := size; j < m.size(); j++ {
						m.unc[j] = anyByte
					}
				}
			} else {
				m.resize(size)
			}
		case 5: // fallocate
			off := rng.Int64N(256 << 10)
			n := 1 + rng.Int64N(64<<10)
			mode := []uint32{0, sluice.FallocKeepSize, sluice.FallocPunchHole | sluice.FallocKeepSize, sluice.FallocZeroRange}[rng.IntN(4)]
			err := f.buffered.Fallocate(mode, off, n)
			m.clean = false
			zeroing := mode&(sluice.FallocPunchHole|sluice.FallocZeroRange) != 0
			if bad("fallocate", err) {
				if zeroing {
					m.maybe(make([]byte, n), off)
				}
			} else {
				if mode&sluice.FallocKeepSize == 0 && off+n > m.size() {
					m.resize(off + n)
				}
				if zeroing {
					for j := off; j < min(off+n, m.size()); j++ {
						m.data[j], m.unc[j] = 0, exact
					}
				}
			}
		case 6, 7: // fsync, on either handle
			h := f.buffered
			if k == 7 {
				h = f.direct
			}
			if !bad("fsync", h.Fsync()) {
				m.synced, m.clean = m.clone(), true
			}
		}
	}
	t.Logf("seed %d: p=%g, %d faults injected, ops %v, shut down %v", seed, prob, inj.Injected(), counts, shutdown)
	inj.Remove()
	if t.Failed() {
		return
	}
	if !shutdown {
		// Healed: everything reads back as modelled, through both paths,
		// and fsync now succeeds.
		for i, f := range files {
			for _, h := range []*sluice.File{f.buffered, f.direct} {
				got, err := readAll(h)
				if err != nil {
					t.Fatalf("seed %d: f%d: read after healing: %v", seed, i, err)
				}
				if int64(len(got)) != f.m.size() {
					t.Errorf("seed %d: f%d: size %d after healing, want %d", seed, i, len(got), f.m.size())
				} else if d := f.m.check(got, 0); d != "" {
					t.Errorf("seed %d: f%d: after healing: %s", seed, i, d)
				}
			}
			err := f.buffered.Fsync()
			if err == nil {
				f.m.synced, f.m.clean = f.m.clone(), true
			} else if !isEIO(err) || !errors.Is(err, sluice.ErrShutdown) {
				t.Errorf("seed %d: f%d: fsync after healing: %v", seed, i, err)
			}
		}
		if !shutdown {
			checkClean(t, e.fs)
		}
	}
	for s := uint64(1); s <= 2; s++ {
		e2 := e.crash(seed*10 + s)
		checkClean(t, e2.fs)
		for i, f := range files {
			if !f.m.clean {
				continue
			}
			got, err := readFile(e2.fs, fmt.Sprintf("/f%d", i))
			if err != nil {
				t.Errorf("seed %d crash %d: f%d: %v", seed, s, i, err)
				continue
			}
			if int64(len(got)) != f.m.synced.size() {
				t.Errorf("seed %d crash %d: f%d: size %d, fsynced %d", seed, s, i, len(got), f.m.synced.size())
			} else if d := f.m.synced.check(got, 0); d != "" {
				t.Errorf("seed %d crash %d: f%d differs from its fsynced content: %s", seed, s, i, d)
			}
		}
		e2.abandon()
	}
}
