package sluice

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"
)

// Tests of FALLOC_FL_COLLAPSE_RANGE and FALLOC_FL_INSERT_RANGE (space.go,
// shiftRange): XFS's errors, the data against a byte model with written,
// unwritten, sparse and dirty cached blocks, block accounting and fsck,
// and crash atomicity.

// TestShiftRangeErrors: the argument rules of vfs_fallocate (6.18) and
// xfs_falloc_collapse_range / xfs_falloc_insert_range.
func TestShiftRangeErrors(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", 0)
	defer f.Close()
	const bs = 4096
	if _, err := f.WriteAt(pattern(16*bs, 1), 0); err != nil {
		t.Fatal(err)
	}
	C, I, K := uint32(FallocCollapseRange), uint32(FallocInsertRange), uint32(FallocKeepSize)
	for _, c := range []struct {
		name   string
		mode   uint32
		off, n int64
		want   error
	}{
		{"collapse|keep", C | K, 0, bs, syscall.EOPNOTSUPP},
		{"insert|keep", I | K, 0, bs, syscall.EOPNOTSUPP},
		{"collapse|insert", C | I, 0, bs, syscall.EOPNOTSUPP},
		{"collapse|punch|keep", C | FallocPunchHole | K, 0, bs, syscall.EOPNOTSUPP},
		{"collapse length 0", C, 0, 0, syscall.EINVAL},
		{"collapse unaligned offset", C, 100, bs, syscall.EINVAL},
		{"collapse unaligned length", C, 0, 100, syscall.EINVAL},
		{"collapse to EOF", C, 15 * bs, bs, syscall.EINVAL},
		{"collapse past EOF", C, 15 * bs, 2 * bs, syscall.EINVAL},
		{"insert at EOF", I, 16 * bs, bs, syscall.EINVAL},
		{"insert unaligned", I, bs, 512, syscall.EINVAL},
		{"insert past the largest size", I, 0, maxFileSize/bs*bs - 8*bs, syscall.EFBIG},
		{"insert offset+length past the largest size", I, bs, maxFileSize - bs/2, syscall.EFBIG},
	} {
		if err := f.Fallocate(c.mode, c.off, c.n); !errors.Is(err, c.want) {
			t.Errorf("%s: Fallocate(%#x, %d, %d) = %v, want %v", c.name, c.mode, c.off, c.n, err, c.want)
		}
	}
	if a, _ := f.Stat(); a.Size != 16*bs {
		t.Fatalf("size %d after refused calls", a.Size)
	}
	ro, err := e.fs.OpenFile("/f", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Fallocate(C, 0, bs); !errors.Is(err, syscall.EBADF) {
		t.Errorf("collapse on a read-only file: %v, want EBADF", err)
	}
	if err := e.fs.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := e.fs.OpenFile("/d", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.in.fallocate(C, 0, bs); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("collapse on a directory: %v, want EISDIR", err)
	}
}

// TestShiftRangeModel runs random collapses and inserts on a file of
// written (direct and written back), unwritten, sparse and dirty cached
// blocks, against a byte model; after each it compares the whole file,
// and at the end checks that the blocks allocated match the extent map and
// that fsck is clean.
func TestShiftRangeModel(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		e := newEnv(t, envConfig{})
		rng := rand.New(rand.NewPCG(seed, 20))
		f := e.mustCreate("/f", 0)
		const bs = 4096
		model := make([]byte, 0)
		setLen := func(n int) {
			if n > len(model) {
				model = append(model, make([]byte, n-len(model))...)
			}
			model = model[:n]
		}
		write := func(off, n int, seedb byte) {
			p := pattern(n, seedb)
			if _, err := f.WriteAt(p, int64(off)); err != nil {
				t.Fatal(err)
			}
			setLen(max(len(model), off+n))
			copy(model[off:], p)
		}
		write(0, 24*bs+100, 1)
		if err := f.Fsync(); err != nil {
			t.Fatal(err)
		}
		for step := range 24 {
			switch rng.IntN(6) {
			case 0: // dirty cached pages, some over holes
				off := rng.IntN(len(model) + 2*bs)
				write(off, 1+rng.IntN(3*bs), byte(step))
			case 1: // punch a hole
				off, n := rng.IntN(len(model)), 1+rng.IntN(4*bs)
				if err := f.Fallocate(FallocPunchHole|FallocKeepSize, int64(off), int64(n)); err != nil {
					t.Fatal(err)
				}
				clear(model[off:min(len(model), off+n)])
			case 2: // preallocate, inside and past EOF
				off, n := rng.IntN(len(model)+bs), 1+rng.IntN(4*bs)
				if err := f.Fallocate(FallocKeepSize, int64(off), int64(n)); err != nil {
					t.Fatal(err)
				}
			case 3: // written back
				if err := f.Fsync(); err != nil {
					t.Fatal(err)
				}
			default:
				blocks := (len(model) + bs - 1) / bs
				off, n := rng.IntN(blocks)*bs, (1+rng.IntN(4))*bs
				if rng.IntN(2) == 0 {
					if off+n >= len(model) {
						continue
					}
					if err := f.Fallocate(FallocCollapseRange, int64(off), int64(n)); err != nil {
						t.Fatalf("seed %d step %d: collapse(%d, %d): %v", seed, step, off, n, err)
					}
					model = append(model[:off], model[off+n:]...)
				} else {
					if err := f.Fallocate(FallocInsertRange, int64(off), int64(n)); err != nil {
						t.Fatalf("seed %d step %d: insert(%d, %d): %v", seed, step, off, n, err)
					}
					model = append(model[:off], append(make([]byte, n), model[off:]...)...)
				}
			}
			got := make([]byte, len(model)+bs)
			nr, _ := f.ReadAt(got, 0)
			if a, _ := f.Stat(); a.Size != int64(len(model)) {
				t.Fatalf("seed %d step %d: size %d, model %d", seed, step, a.Size, len(model))
			}
			if !bytes.Equal(got[:nr], model) {
				i := 0
				for i < nr && i < len(model) && got[i] == model[i] {
					i++
				}
				t.Fatalf("seed %d step %d: data differs from the model at byte %d (read %d, model %d)", seed, step, i, nr, len(model))
			}
		}
		if err := f.Fsync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		checkClean(t, e.fs)
		e = e.reopen()
		checkClean(t, e.fs)
		g, err := e.fs.OpenFile("/f", O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustReadAll(t, g); !bytes.Equal(got, model) {
			t.Fatalf("seed %d: after reopen the data differs from the model", seed)
		}
		g.Close()
		e.close()
	}
}

// TestShiftRangeFrees: a collapse frees the collapsed blocks (the
// file's allocation and the volume's free count both move by them), an
// insert allocates nothing, and the cached dirty pages past the offset
// are written back before the shift.
func TestShiftRangeFrees(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", O_DIRECT)
	defer f.Close()
	const bs = 4096
	if _, err := f.WriteAt(pattern(16*bs, 3), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	free := func() uint64 {
		st, err := e.fs.Statfs()
		if err != nil {
			t.Fatal(err)
		}
		return st.BlocksFree
	}
	free0 := free()
	a0, _ := f.Stat()
	if err := f.Fallocate(FallocCollapseRange, 4*bs, 4*bs); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.SyncAll(); err != nil { // freed blocks become free once durable
		t.Fatal(err)
	}
	a1, _ := f.Stat()
	if a0.Blocks-a1.Blocks != 4*bs/512 || a1.Size != 12*bs {
		t.Fatalf("collapse of 4 blocks: blocks %d -> %d, size %d", a0.Blocks, a1.Blocks, a1.Size)
	}
	if got := free() - free0; got != 4 {
		t.Fatalf("collapse of 4 blocks freed %d", got)
	}
	if err := f.Fallocate(FallocInsertRange, 0, 8*bs); err != nil {
		t.Fatal(err)
	}
	if a2, _ := f.Stat(); a2.Blocks != a1.Blocks || a2.Size != 20*bs {
		t.Fatalf("insert: blocks %d -> %d, size %d", a1.Blocks, a2.Blocks, a2.Size)
	}
	checkClean(t, e.fs)
}

// TestShiftRangeCrash: a collapse or an insert is one metadata
// transaction with the size, so after a crash the file is wholly as
// before or wholly as after, never shifted in part.
func TestShiftRangeCrash(t *testing.T) {
	const bs = 4096
	for seed := uint64(1); seed <= 6; seed++ {
		e := newEnv(t, envConfig{})
		f := e.mustCreate("/f", 0)
		before := pattern(32*bs, byte(seed))
		if _, err := f.WriteAt(before, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Fallocate(FallocPunchHole|FallocKeepSize, 8*bs, 2*bs); err != nil {
			t.Fatal(err)
		}
		clear(before[8*bs : 10*bs])
		if err := f.Fsync(); err != nil {
			t.Fatal(err)
		}
		var after []byte
		if seed%2 == 0 {
			if err := f.Fallocate(FallocCollapseRange, 4*bs, 6*bs); err != nil {
				t.Fatal(err)
			}
			after = append(bytes.Clone(before[:4*bs]), before[10*bs:]...)
		} else {
			if err := f.Fallocate(FallocInsertRange, 6*bs, 3*bs); err != nil {
				t.Fatal(err)
			}
			after = append(append(bytes.Clone(before[:6*bs]), make([]byte, 3*bs)...), before[6*bs:]...)
		}
		if seed%3 == 0 {
			if err := f.Fsync(); err != nil {
				t.Fatal(err)
			}
		}
		c := e.crash(seed)
		checkClean(t, c.fs)
		g, err := c.fs.OpenFile("/f", O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := mustReadAll(t, g)
		g.Close()
		switch {
		case bytes.Equal(got, after):
		case bytes.Equal(got, before) && seed%3 != 0:
		default:
			t.Fatalf("seed %d: after the crash the file (%d bytes) is neither wholly before (%d) nor wholly after (%d)", seed, len(got), len(before), len(after))
		}
		c.close()
	}
}
