package ring

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/volume"
)

// env is a file system on a memory device behind a fault-injecting
// wrapper, with an in-memory Pebble (testvol, not crashable), as the root
// package's test environment.
type env struct {
	t     testing.TB
	mem   *memdev.Device
	fault *faultdev.Device
	vol   *volume.Volume
	fs    *sluice.FS

	mu    sync.Mutex
	gates []*faultdev.Gate
}

func newEnv(t testing.TB, pol sluice.Policy) *env {
	t.Helper()
	return newEnvOpts(t, sluice.Options{Policy: &pol})
}

func newEnvOpts(t testing.TB, opts sluice.Options) *env {
	t.Helper()
	d, err := testvol.Format(testvol.Config{DeviceBytes: 64 << 20, IOUnit: 512, NotCrashable: true})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := d.OpenKV()
	if err != nil {
		t.Fatal(err)
	}
	fault := faultdev.New(d.Mem)
	v, err := volume.Attach(fault, kv)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := sluice.OpenVolume(v, &opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, mem: d.Mem, fault: fault, vol: v, fs: fs}
	t.Cleanup(func() {
		e.openGates()
		e.fs.Close()
		e.vol.KV.Close()
		e.fault.Close()
	})
	return e
}

// gate installs a closed gate; every gate is opened before the rings and
// the file system close.
func (e *env) gate(p faultdev.Predicate) *faultdev.Gate {
	g := e.fault.NewGate(p)
	e.mu.Lock()
	e.gates = append(e.gates, g)
	e.mu.Unlock()
	return g
}

func (e *env) openGates() {
	e.mu.Lock()
	gs := e.gates
	e.mu.Unlock()
	for _, g := range gs {
		g.Open()
	}
}

// ring makes a ring that is closed (after the env's gates open) at the
// end of the test.
func (e *env) ring(entries int, o *Options) *Ring {
	e.t.Helper()
	r, err := New(entries, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		e.openGates()
		r.Close()
	})
	return r
}

func (e *env) open(path string, flags int) *sluice.File {
	e.t.Helper()
	f, err := e.fs.OpenFile(path, sluice.O_RDWR|sluice.O_CREAT|flags, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { f.Close() })
	return f
}

// prewrite fills path with pattern(size, seed) through an O_DIRECT handle
// (so nothing stays cached, and every block is a written extent) and
// returns the data.
func (e *env) prewrite(path string, size int, seed byte) []byte {
	e.t.Helper()
	f, err := e.fs.OpenFile(path, sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECT, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	data := pattern(size, seed)
	if n, err := f.Pwrite(data, 0, 0); err != nil || n != size {
		e.t.Fatalf("prewrite %s: %d, %v", path, n, err)
	}
	return data
}

func pattern(n int, seed byte) []byte {
	b := device.AlignedBuf(n)
	for i := range b {
		b[i] = byte(i*31+i/4096) ^ seed
	}
	return b
}

// waitFor polls cond until it holds; it fails the test after 10 s. It
// waits for a state the test has made inevitable (not for time to pass).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// reap waits for exactly n completions (failing after 10 s).
func reap(t testing.TB, r *Ring, n int) []CQE {
	t.Helper()
	out := make([]CQE, n)
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for got < n {
		k, err := r.Wait(ctx, n-got, out[got:])
		got += k
		if err != nil {
			t.Fatalf("reaping %d completions: got %d: %v (%v)", n, got, err, r.Stats())
		}
	}
	return out
}

// byTag indexes completions by tag.
func byTag(cqes []CQE) map[uint64]CQE {
	m := map[uint64]CQE{}
	for _, c := range cqes {
		m[c.Tag] = c
	}
	return m
}

func gateHeld(t testing.TB, g *faultdev.Gate, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.WaitHeld(ctx, n); err != nil {
		t.Fatal(err)
	}
}

func checkBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		if len(got) != len(want) {
			t.Fatalf("%s: %d bytes, %d expected", what, len(got), len(want))
		}
		first, last, n := -1, -1, 0
		zeros := 0
		for i := range got {
			if got[i] != want[i] {
				if first < 0 {
					first = i
				}
				last = i
				n++
				if got[i] == 0 {
					zeros++
				}
			}
		}
		t.Fatalf("%s: %d of %d bytes differ, in [%d, %d] (%d of them read as zero)", what, n, len(want), first, last, zeros)
	}
}
