package sluice

import (
	"context"
	"errors"
	"fmt"
	"path"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/checksum"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/meta"
	"golang.org/x/time/rate"
)

// Scrub: read every written block of every file and verify its data
// checksum (sluice scrub; sluice fsck on a checksummed volume). It runs on
// a live file system as well as on one opened for it alone: each file's
// mapping is taken under its inode's mutex and its blocks read straight
// from the device (not through the page cache, which holds only what was
// verified or written). A block written once is never written again while
// it is mapped (sums.go), so a block that does not verify is checked again
// against the file's mapping as it is then, and reported only if the file
// still maps it and it still does not verify: a block the file freed and
// the allocator gave to another write meanwhile is not damage.

// ScrubOptions configures Scrub.
type ScrubOptions struct {
	// BytesPerSecond caps the rate of the scrub's device reads (online
	// scrubs should leave the device to the file system's users). The
	// default value is 0: no limit.
	BytesPerSecond int64
}

// ScrubReport is what Scrub found.
type ScrubReport struct {
	Files         int           `json:"files"`          // regular files scrubbed
	Blocks        int64         `json:"blocks"`         // written blocks read and verified
	Bytes         int64         `json:"bytes"`          // bytes read
	Damaged       []DamagedFile `json:"damaged"`        // files with blocks that do not verify, by path
	Elapsed       time.Duration `json:"elapsed_ns"`     // how long it ran
	DataChecksums bool          `json:"data_checksums"` // whether the volume has any: without them nothing is verified
}

// Clean reports whether no damage was found.
func (r *ScrubReport) Clean() bool { return len(r.Damaged) == 0 }

// DamagedFile is a file with blocks whose data does not match its checksum.
type DamagedFile struct {
	Path   string        `json:"path"`
	Ino    Ino           `json:"ino"`
	Blocks []DamagedSpan `json:"blocks"`
}

// DamagedSpan is one damaged block of a file.
type DamagedSpan struct {
	Offset      int64  `json:"offset"`       // file offset of the block
	DeviceBlock uint64 `json:"device_block"` // where it is on the data device
	Missing     bool   `json:"missing"`      // no checksum recorded (rather than a mismatch)
}

// scrubChunk is the most a scrub reads at once.
const scrubChunk = 1 << 20

// Scrub reads and verifies every written block of every regular file
// reachable from the root (each inode once, under its first path in
// name order) and reports the damaged ones. A file system without data
// checksums reads nothing and reports DataChecksums false. It stops
// early, with ctx's error, when ctx is done.
func (fs *FS) Scrub(ctx context.Context, o ScrubOptions) (*ScrubReport, error) {
	t0 := time.Now()
	r := &ScrubReport{DataChecksums: fs.sums != nil}
	if fs.sums == nil {
		return r, nil
	}
	lim := rate.NewLimiter(rate.Inf, 0)
	if o.BytesPerSecond > 0 {
		lim = rate.NewLimiter(rate.Limit(o.BytesPerSecond), scrubChunk)
	}
	seen := map[Ino]bool{}
	var walk func(dir Ino, p string) error
	walk = func(dir Ino, p string) error {
		ents, err := fs.ReadDirIno(dir)
		if err != nil {
			return fmt.Errorf("reading directory %s: %w", p, err)
		}
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return err
			}
			child := path.Join(p, e.Name)
			switch {
			case isDir(e.Type):
				if err := walk(e.Ino, child); err != nil {
					return err
				}
			case isReg(e.Type) && !seen[e.Ino]:
				seen[e.Ino] = true
				if err := fs.scrubFile(ctx, e.Ino, child, r, lim); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := walk(meta.RootIno, "/")
	r.Elapsed = time.Since(t0)
	return r, err
}

// scrubFile verifies the written blocks of inode ino (at path p).
func (fs *FS) scrubFile(ctx context.Context, ino Ino, p string, r *ScrubReport, lim *rate.Limiter) error {
	in, err := fs.getInode(ino)
	if err == syscall.ENOENT {
		return nil // unlinked meanwhile
	}
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	defer fs.putInode(in)
	r.Files++
	bs := fs.blockSize
	in.mu.Lock()
	m, err := in.extentsLocked()
	var exts []mappedRun
	if err == nil {
		for _, e := range m.Extents() {
			if e.State == meta.Written {
				exts = append(exts, mappedRun{fb: e.FileBlock, dev: e.DevBlock, n: e.Len})
			}
		}
	}
	in.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	var dmg *DamagedFile
	buf := device.AlignedBuf(scrubChunk)
	for _, x := range exts {
		for done := uint64(0); done < x.n; {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := min(x.n-done, uint64(scrubChunk/bs))
			b := buf[:int64(k)*bs]
			dev := x.dev + done
			if err := lim.WaitN(ctx, len(b)); err != nil {
				return err
			}
			if err := device.ReadAt(fs.dev, b, int64(dev)*bs); err != nil {
				return fmt.Errorf("%s: reading device block %d: %w", p, dev, eio(err))
			}
			r.Blocks += int64(k)
			r.Bytes += int64(len(b))
			for i := uint64(0); i < k; i++ {
				fb, db := x.fb+done+i, dev+i
				if _, err := fs.sums.Verify(db, b[int64(i)*bs:int64(i+1)*bs]); err != nil && in.stillDamaged(fb, db) {
					if dmg == nil {
						r.Damaged = append(r.Damaged, DamagedFile{Path: p, Ino: ino})
						dmg = &r.Damaged[len(r.Damaged)-1]
					}
					dmg.Blocks = append(dmg.Blocks, DamagedSpan{Offset: int64(fb) * bs, DeviceBlock: db, Missing: isMissing(err)})
					fs.counters.SumMismatches.Add(1)
				}
			}
			fs.counters.SumVerifiedBlocks.Add(int64(k))
			done += k
		}
	}
	return nil
}

// mappedRun is a run of written file blocks and the device blocks that
// back them.
type mappedRun struct{ fb, dev, n uint64 }

// stillDamaged reports whether file block fb still maps device block dev
// (written) and dev, read again, still does not verify.
func (in *inode) stillDamaged(fb, dev uint64) bool {
	fs := in.fs
	in.mu.Lock()
	s := in.ext.Lookup(fb, 1, nil)[0]
	in.mu.Unlock()
	if s.Hole || s.State != meta.Written || s.DevBlock != dev {
		return false
	}
	b := device.AlignedBuf(int(fs.blockSize))
	if err := device.ReadAt(fs.dev, b, int64(dev)*fs.blockSize); err != nil {
		return true
	}
	_, err := fs.sums.Verify(dev, b)
	return err != nil
}

func isMissing(err error) bool { return errors.Is(err, checksum.ErrMissing) }
