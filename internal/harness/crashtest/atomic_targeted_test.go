package crashtest

import (
	"fmt"
	"testing"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
)

// Untorn writes (RWFAtomic): concurrent 16-64 KiB O_DIRECT overwrites,
// each slot of the file always written whole at one size aligned to it,
// crashed with every fate of the pending device writes (kept, dropped, or
// torn at even or odd sectors) and with several metadata prefixes. With
// the flag, every slot holds exactly one write's sectors after every crash
// (all of the old, or all of the new); without it, the same workload must
// tear in some crash, or the check could not fail.

// atomicSlot is a byte range every write of the workload covers whole.
type atomicSlot struct{ off, n int64 }

var atomicSlots = []atomicSlot{
	{0, 16 << 10},
	{32 << 10, 32 << 10},
	{64 << 10, 64 << 10},
	{128 << 10, 16 << 10},
	{192 << 10, 64 << 10},
	{256 << 10, 16 << 10}, // past the first write: a hole, then unwritten
}

func atomicRanges() [][2]int64 {
	var rs [][2]int64
	for _, s := range atomicSlots {
		rs = append(rs, [2]int64{s.off, s.n})
	}
	return rs
}

func TestTargetedAtomicWritesUntorn(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		name := "RWFAtomic"
		flags := int(sluice.RWFAtomic)
		if !atomic {
			name, flags = "plain", 0
		}
		t.Run(name, func(t *testing.T) {
			s := newScript(t, EnvConfig{BlockSize: bs4k})
			do(t, s,
				Op{Kind: OpCreate, Path: "/a", H: 0, Flags: sluice.O_DIRECT},
				Op{Kind: OpWrite, H: 0, Off: 0, N: 256 << 10},
				Op{Kind: OpFsync, H: 0},
				// Overwrites of durable written blocks; the last slot
				// extends the file into a hole.
				Op{Kind: OpWriteParallel, H: 0, Ranges: atomicRanges(), Flags: flags},
				Op{Kind: OpFsync, H: 0},
				// Overwrites of the remapped blocks, made durable.
				Op{Kind: OpWriteParallel, H: 0, Ranges: atomicRanges(), Flags: flags},
				// A pending conversion: a plain write into a new slot,
				// then overwrites of it (an atomic one settles it first).
				Op{Kind: OpWrite, H: 0, Off: 320 << 10, N: 32 << 10},
				Op{Kind: OpWriteParallel, H: 0, Ranges: [][2]int64{{320 << 10, 32 << 10}, {192 << 10, 64 << 10}}, Flags: flags},
				// Overwrites of remaps pending at the crash, twice.
				Op{Kind: OpWriteParallel, H: 0, Ranges: atomicRanges()[:4], Flags: flags},
				Op{Kind: OpWriteParallel, H: 0, Ranges: atomicRanges()[1:3], Flags: flags},
			)
			slots := append(append([]atomicSlot(nil), atomicSlots...), atomicSlot{320 << 10, 32 << 10})
			torn := 0
			crashAll(t, s, 96, 5, func(c *checker, r *CrashResult) {
				if bad := tornSlots(r.FS, "/a", slots); bad != "" {
					torn++
					if atomic {
						c.errorf("crash %s: %s", r.Desc, bad)
					}
				}
			})
			if !atomic && torn == 0 {
				t.Errorf("no crash tore a plain write: the check cannot fail")
			}
			t.Logf("%d crashes tore a slot", torn)
		})
	}
}

// tornSlots reads path and describes the first slot (below EOF) whose
// sectors are not all zeros or all of one write at their offsets, or ""
// if there is none.
func tornSlots(fs *sluice.FS, path string, slots []atomicSlot) string {
	f, err := fs.OpenFile(path, sluice.O_RDONLY|sluice.O_DIRECT, 0)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	for _, sl := range slots {
		if sl.off >= a.Size {
			continue
		}
		if sl.off+sl.n > a.Size {
			return fmt.Sprintf("slot [%d +%d] cut by EOF %d", sl.off, sl.n, a.Size)
		}
		buf := device.AlignedBuf(int(sl.n))
		if _, err := f.Pread(buf, sl.off, 0); err != nil {
			return err.Error()
		}
		k0, t0 := decodeSector(buf[:SectorSize])
		for o := int64(0); o < sl.n; o += SectorSize {
			k, tag := decodeSector(buf[o : o+SectorSize])
			if k != k0 || (k == Tagged && (tag.Seq != t0.Seq || tag.Off != sl.off+o)) || k == Garbage {
				return fmt.Sprintf("slot [%d +%d] torn: sector 0 %s, sector %d %s", sl.off, sl.n, describeSector(k0, t0), o/SectorSize, describeSector(k, tag))
			}
		}
	}
	return ""
}
