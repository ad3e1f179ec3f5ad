package sluice

import (
	"math/rand/v2"
	"testing"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/volume"
)

// BenchmarkDataChecksums measures what data checksums cost, on two real
// volumes side by side (SLUICE_BENCH=1; "off" and "on", each with a 1 GiB
// file written and synced, and a 512 MiB one written once in order, for
// the reads: /data fragments as the randrw cell overwrites it out of place
// on the checksummed volume, and a fragmented map would be measured
// instead of the checksums): W1's 512 B O_DIRECT reads (a checksummed read
// reads and verifies the whole 4 KiB block), W2's 4 KiB O_DIRECT randrw
// (every checksummed overwrite goes out of place), both from 32
// goroutines, and 4 KiB buffered random reads from 8 goroutines on a cold
// 16 MiB cache (each read fills a page from the device and verifies it).
// runOps reports cpu-ns/op beside ns/op.
//
//	SLUICE_BENCH=1 go test -run '^$' -bench 'DataChecksums' -benchtime 100000x -count 3 .
func BenchmarkDataChecksums(b *testing.B) {
	const fileBytes = 1 << 30
	for _, sums := range []bool{false, true} {
		name, vol := "off", "vol"
		if sums {
			name, vol = "on", "sums"
		}
		fs, done := benchVolumeWith(b, Concurrent(), vol, volume.MkfsOptions{DataChecksums: sums})
		if fs.DataChecksums() != sums {
			b.Fatalf("volume %s: data checksums %t", vol, fs.DataChecksums())
		}
		f, err := fs.OpenFile("/data", O_RDWR|O_DIRECT, 0)
		if err != nil {
			b.Fatal(err)
		}
		r := benchReadFile(b, fs)
		bufs := make([][]byte, 32)
		for i := range bufs {
			bufs[i] = device.AlignedBuf(4096)
		}
		b.Run("read512/g32/"+name, func(b *testing.B) {
			runOps(b, fs.vol.Dev, 32, func(w int, rng *rand.Rand) error {
				_, err := r.ReadAt(bufs[w][:512], rng.Int64N(readBytes/512)*512)
				return err
			})
		})
		b.Run("randrw4k/g32/"+name, func(b *testing.B) {
			runOps(b, fs.vol.Dev, 32, func(w int, rng *rand.Rand) error {
				off := rng.Int64N(fileBytes/4096) * 4096
				if rng.IntN(2) == 0 {
					_, err := f.WriteAt(bufs[w], off)
					return err
				}
				_, err := f.ReadAt(bufs[w], off)
				return err
			})
		})
		f.Close()
		r.Close()
		done()
		b.Run("bufread4k/g8/"+name, func(b *testing.B) {
			fs, done := benchVolumeWith(b, Concurrent(), vol, volume.MkfsOptions{DataChecksums: sums})
			defer done()
			_ = fs.Close()
			fs, err := Open(fs.vol.Dir, &Options{CacheSizeBytes: 16 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer fs.Close()
			f, err := fs.OpenFile("/reads", O_RDONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			runOps(b, fs.vol.Dev, 8, func(w int, rng *rand.Rand) error {
				_, err := f.ReadAt(bufs[w], rng.Int64N(readBytes/4096)*4096)
				return err
			})
		})
	}
}

// readBytes is the size of the benchmark's read file.
const readBytes = 512 << 20

// benchReadFile opens /reads, writing it (in order, 1 MiB at a time) and
// syncing it first if it is not there yet.
func benchReadFile(b *testing.B, fs *FS) *File {
	f, err := fs.OpenFile("/reads", O_RDWR|O_CREAT|O_DIRECT, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	if a, _ := f.Stat(); a.Size < readBytes {
		buf := pattern(1<<20, 9)
		for off := int64(0); off < readBytes; off += 1 << 20 {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Fsync(); err != nil {
			b.Fatal(err)
		}
	}
	return f
}
