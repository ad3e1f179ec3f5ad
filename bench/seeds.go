package bench

// The seeds' own numbers, from the mailing-list threads named in README.md,
// for the tables' captions and the seed-ratio columns.

// Seed 001 (XFS 2011, Jörn Engel's seqrd table in the linux-fsdevel thread
// "Filesystem benchmarks on reasonably fast hardware", July 2011): O_DIRECT sequential reads of one file, by
// block size and threads (1, 2, 4, 8, 16, 32 of the 1..128 measured).
// The units are not stated in the thread (IOPS by their scale).
var (
	seed001Threads = []int{1, 2, 4, 8, 16, 32}
	seed001Before  = map[int][]float64{
		512:   {37353, 33990, 33292, 33332, 33306, 33296},
		4096:  {9100, 8835, 8882, 8896, 8874, 8890},
		16384: {4698, 4424, 4397, 4402, 4394, 4398},
	}
	seed001After = map[int][]float64{
		512:   {31832, 61257, 79545, 108782, 176341, 303836},
		4096:  {8931, 14971, 24794, 44223, 83512, 144867},
		16384: {4542, 8311, 15738, 28955, 38273, 36644},
	}
)

// seed001Ratio returns after/before for bs at threads, and whether the
// seed measured it.
func seed001Ratio(bs, threads int) (float64, bool) {
	b, a := seed001Before[bs], seed001After[bs]
	for i, t := range seed001Threads {
		if t == threads && b != nil {
			return a[i] / b[i], true
		}
	}
	return 0, false
}

const seed001Caption = "Seed 001 (XFS, 2011; 8..128 threads on fast hardware; units not stated, IOPS by their scale): " +
	"before (exclusive I/O lock on every direct read) 512 B: 37353 33990 33292 33332 33306 33296 at 1/2/4/8/16/32 threads; " +
	"4 KiB: 9100 8835 8882 8896 8874 8890; 16 KiB: 4698 4424 4397 4402 4394 4398. " +
	"After (shared lock): 512 B: 31832 61257 79545 108782 176341 303836; 4 KiB: 8931 14971 24794 44223 83512 144867; " +
	"16 KiB: 4542 8311 15738 28955 38273 36644 (512 B at 128 threads: 33271 -> 584741, x17.6). " +
	"After/before at 32 threads: 512 B x9.1, 4 KiB x16.3, 16 KiB x8.3; at 1 thread x0.85-0.98."

// Seed 000 (XFS + iomap 2021): fio randrw 512 B, libaio, QD32, 30 s, on a
// VM device limited to about 150k IOPS.
const (
	seed000BeforeIOPS512 = 18254  // (4560 + 4567) KiB/s / 512 B
	seed000AfterIOPS512  = 154010 // 2 x 37.6 MiB/s / 512 B
	seed000AfterIOPS4K   = 151552 // 2 x 296 MiB/s / 4 KiB
)

const seed000Caption = "Seed 000 (XFS + iomap, 2021; fio randrw bs=512 libaio iodepth=32 direct=1, 30 s, VM device limited to ~150k IOPS): " +
	"before READ 4560 KiB/s + WRITE 4567 KiB/s = ~18k IOPS; after READ 37.6 MiB/s + WRITE 37.6 MiB/s = ~150k IOPS (x8.4); " +
	"4 KiB control: 296 MiB/s each way, ~150k IOPS, the same before and after."

// Seed 002 (io_uring + XFS 2023): 8 threads writing 4 KiB to one file on
// XFS on a gen2 Optane.
const (
	seed002BeforeIOPS = 1350000
	seed002AfterIOPS  = 1410000
)

const seed002Caption = "Seed 002 (io_uring + XFS, 2023; 8 threads writing 4 KiB chunks to one file, XFS on gen2 Optane; tool and depth not stated): " +
	"hashed ~1350K IOPS (~5290 MiB/s) -> parallel ~1410K IOPS (~5500 MiB/s), x1.04."

// Seed 003 (io_uring async buffered reads 2020): 4 GiB of random 4 KiB
// reads at QD32 on ext4 (a custom app), and a fio io_uring randread at
// iodepth 1..16 on a virtual NVMe saturating near 65k.
var (
	seed003Depths    = []int{1, 2, 4, 8, 16}
	seed003Mainline  = []float64{8294, 18900, 28500, 31400, 37800}
	seed003Patched   = []float64{9046, 19800, 39200, 64400, 65700}
	seed003QD32Ratio = 12.05 / 9.28 // io-wq run time / async run time
)

const seed003Caption = "Seed 003 (io_uring async buffered reads, 2020; 4 GiB of random 4 KiB reads at QD32 from a file on ext4, custom app): " +
	"preadv 73.8 s (~14.2k IOPS, CPU ~13%); io_uring + io-wq workers 12.05 s (~87k IOPS, CPU ~82%: 32% app + 32 workers x ~1.6%); " +
	"async buffered 9.28 s (~113k IOPS, CPU ~52%): x1.30 IOPS and ~0.49x CPU per read. " +
	"fio io_uring randread bs=4k, mainline -> patched IOPS at iodepth 1/2/4/8/16: 8294->9046, 18.9k->19.8k, 28.5k->39.2k, 31.4k->64.4k, 37.8k->65.7k (virtual NVMe, ~65k limit)."

// Seed 004 (pNFS block layout 2019): buffered and O_SYNC overwrite of an
// existing, uncached file, MiB/s, 4.20 vs patched (the thread's table).
var (
	seed004BS       = []int{4 << 10, 32 << 10, 512 << 10}
	seed004Buffered = [][2]float64{{21.3, 233}, {22.2, 254}, {22.4, 258}}
	seed004Sync     = [][2]float64{{3.84, 4.68}, {12.2, 32.9}, {18.5, 151}}
)

// seed004Ratio returns patched/vanilla for bs and sync.
func seed004Ratio(bs int, sync bool) (float64, bool) {
	for i, b := range seed004BS {
		if b == bs {
			v := seed004Buffered[i]
			if sync {
				v = seed004Sync[i]
			}
			return v[1] / v[0], true
		}
	}
	return 0, false
}

const seed004Caption = "Seed 004 (pNFS block layout client, 2019; 1 GbE + 8G FC to an HP P6350 array): overwrite of an existing uncached file, MiB/s, 4.20 -> patched: " +
	"buffered 4 KiB 21.3 -> 233 (x10.9), 32 KiB 22.2 -> 254 (x11.4), 512 KiB 22.4 -> 258 (x11.5); " +
	"O_SYNC 4 KiB 3.84 -> 4.68 (x1.2), 32 KiB 12.2 -> 32.9 (x2.7), 512 KiB 18.5 -> 151 (x8.2); plain reads and writes unchanged (~548 MiB/s)."
