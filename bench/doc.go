// Package bench reproduces the seed experiments (the measurements of the
// five kernel threads in README.md's table, W1-W5 below) and measures the
// two optimisations beyond them (A1, Z1) on the engine and on peers, and
// reports them as text tables, JSON and a self-contained HTML page
// (report.html.tmpl, through html/template). `sluice bench` is its
// command-line face.
//
// # What runs
//
// Each experiment runs the engine with the seed's optimisation off
// (Policy classic) and on (concurrent), through the library (File.ReadAt,
// File.WriteAt) or the ring (ring.Ring, driven by this package's ringload.go),
// and where another toggle would blur the comparison, with that seed's
// toggle alone off as well (W2: "concurrent-OptimisticUnalignedWrites").
// A1 and Z1 run classic, seeds (sluice.Seeds(): the five seeds on, the
// two beyond them off, the kernel's locking today) and concurrent, and
// their ratio is concurrent/seeds.
// The same workload then runs through system calls on each peer: the raw
// image ("fio:raw": a fully written plain file on the work directory's
// file system, the physical limit), XFS and ext4 on direct-I/O loop
// devices (Config.KernelPeers, root) and any --target directory. Peers
// run under fio when it is installed (through internal/harness/fio, the
// tree's one fio runner), otherwise under a built-in Go runner of psync
// goroutines ("go:raw").
//
//	W1 (seed 001) O_DIRECT sequential reads of one file, bs 512 B/4 KiB/16 KiB x 1-32
//	   readers, each in its own region; engine: one goroutine per reader.
//	W2 (seed 000) randrw O_DIRECT, 50/50, 32 in flight, 512 B and 4 KiB, on a fully
//	   written file; engine: 32 goroutines (not the ring, whose hashing would mix in
//	   seed 002); peers: fio libaio iodepth=32.
//	W3 (seed 002) 8 submitters x depth 8 random 4 KiB O_DIRECT writes to one file,
//	   every write punted to the pool: hashed (classic) vs parallel (concurrent), with
//	   a ring per submitter (as fio jobs, each with its own io-wq) and one shared ring.
//	W4 (seed 003) random 4 KiB buffered reads of a cold file through one ring at depth
//	   1-32: IOPS, CPU per read, peak goroutines, peak blocked workers.
//	W5 (seed 004) buffered and O_SYNC sequential overwrite of an existing uncached file,
//	   4/32/512 KiB, on a volume with a 4 KiB I/O unit and one with a 64 KiB unit:
//	   MiB/s (final fsync included) and device reads.
//	A1 (ParallelAppends) 1-32 appenders of 4 KiB records to one file that starts empty,
//	   O_DIRECT|O_APPEND (aligned buffers) and buffered O_APPEND; engine: one goroutine
//	   and one sluice.File per appender, File.Write (not one shared File, whose position
//	   lock would serialise them as write(2) does); peers: the Go runner, one descriptor
//	   per appender, always (fio has no O_APPEND: its file_append only starts each job at
//	   the end of the file and writes precomputed offsets with pwrite, so numjobs on one
//	   file are not appenders). Each record is tagged at both ends with its appender and
//	   sequence number; after each cell the file must be exactly the records appended,
//	   each once and whole, or the cell is an error. A cell stops at its time or when
//	   the file reaches Sizing.A1Bytes. The goal: concurrent/seeds >= 3x at 8+ appenders.
//	Z1 (BlockRangeExclusion) 512 B O_DIRECT random writes, 32 in flight, into a file
//	   fallocated (mode 0) and never written, made afresh for every cell and repetition:
//	   every write lands in an unwritten extent and must zero the rest of its 4 KiB
//	   block. Engine: 32 goroutines (as W2), each write in a block not written before
//	   (the region's blocks in a random order, a random 512 B slot in each), so the cell
//	   stops at its time or when every block of Sizing.Z1Bytes (1 GiB full, 256 MiB
//	   quick) is written; converted_frac says how much was (a few per cent on the 2-CPU
//	   machine); a sample of the written blocks is read back (the write in its slot,
//	   zeros around it). Peers: fio --rw=randwrite --bs=512 --direct=1 --ioengine=libaio
//	   --iodepth=32 --fallocate=native on a file removed before the cell (fio creates and
//	   fallocates it and, a write job without --overwrite=1, writes nothing before its
//	   own I/O); its random map writes no 512 B block twice, but a small share of its
//	   writes land in a 4 KiB block an earlier one converted. The goal:
//	   concurrent/seeds >= 3x.
//	   For A1 and Z1 the raw peer is a fresh file on the work directory's own file
//	   system: there is no raw-device ceiling for appends or unwritten extents.
//
// # Method
//
// Warm cells (W1-W3, A1, Z1) are measured after a warm-up that is not
// counted; a cell bounded by a count too (A1, Z1) ends its measured
// window when the count runs out, and a window in which nothing
// completed is extended until something does (at most ten times).
// Cold cells (W4, W5) open the engine afresh (an empty page cache; the
// data device is O_DIRECT, so the host page cache is not involved); peers'
// cold cells drop the file's pages (fadvise, fio --invalidate=1) and, as
// root, the whole page cache. Engine cells repeat Sizing.Reps times,
// interleaved and with the policy order alternating, and rows report
// the median with every repetition in Samples. Every row carries what it
// ran: "options" (the engine's Options.String() and the data device's
// options) and "workload", or the peer's fio "cmdline". Env records the
// machine, the disk under the work directory, the sluice version and
// the load from other processes, which on a shared machine is the
// largest source of error: the report warns when it was high.
//
// # Metrics
//
// Row.Metrics keys, present where they apply: iops, read_iops,
// write_iops, mib_s, read_mib_s, write_mib_s; cpu_ns_per_io (the bench
// process's getrusage user+system time per I/O over the measured window;
// for fio, its jobs' usr_cpu+sys_cpu, which include kernel io_uring
// workers), ctx_switches_per_io; W1/W2 engine: excl_lock_frac (share of
// direct I/Os that took the I/O lock exclusive), drains_per_io,
// eagain_retries_per_write; A1 engine: excl_lock_frac (share of the
// cell's appends, warm-up included, that took the I/O lock exclusive),
// records (appended in the cell, warm-up included, all verified),
// max_in_flight (O_DIRECT: the most direct writes in flight on the file
// at once over the cell; 1 while appends are exclusive); Z1 engine:
// excl_lock_frac, drains_per_io, eagain_retries_per_write (seeds: the
// overwrite-only attempts that fell back), max_in_flight, converted_frac
// (the share of the region's blocks written by the cell's end); W3:
// blocked_workers_max and busy_workers_max
// (per ring), hashed_waits_per_io, max_device_in_flight; W4:
// goroutines_max, goroutines_base, blocked_workers_max, workers_max,
// cache_hit_pct, retries_armed, punts_per_io, allocs_per_io (the
// process's heap allocations per read, runtime.MemStats.Mallocs); W5:
// device_reads (cache_reads + rmw_unit_reads), device_reads_per_mib, reads_avoided,
// device_writes, device_flushes, bytes_written, seconds; peers' cold
// cells on a device of the run's own (kernel peers): device_reads,
// device_read_mib, device_reads_per_mib.
//
// # Concurrency
//
// Run is not safe to call twice at once on the same work directory
// (volumes are locked and Run fails). A Report is plain data.
package bench
