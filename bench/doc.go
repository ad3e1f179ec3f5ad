// Package bench reproduces the seed experiments (the measurements of the
// five kernel threads in README.md's table, W1-W5 below) on the engine and
// on peers, and reports them as text tables, JSON and a
// self-contained HTML page (report.html.tmpl, through html/template).
// `sluice bench` is its command-line face.
//
// # What runs
//
// Each experiment runs the engine with the seed's optimisation off
// (Policy classic) and on (concurrent), through the library (File.ReadAt,
// File.WriteAt) or the ring (ring.Ring, driven by this package's ringload.go),
// and where another toggle would blur the comparison, with that seed's
// toggle alone off as well (W2: "concurrent-OptimisticUnalignedWrites").
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
//
// # Method
//
// Warm cells (W1-W3) are measured after a warm-up that is not counted.
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
// eagain_retries_per_write; W3: blocked_workers_max and busy_workers_max
// (per ring), hashed_waits_per_io, max_device_in_flight; W4:
// goroutines_max, goroutines_base, blocked_workers_max, workers_max,
// cache_hit_pct, retries_armed, punts_per_io; W5: device_reads
// (cache_reads + rmw_unit_reads), device_reads_per_mib, reads_avoided,
// device_writes, device_flushes, bytes_written, seconds; peers' cold
// cells on a device of the run's own (kernel peers): device_reads,
// device_read_mib, device_reads_per_mib.
//
// # Concurrency
//
// Run is not safe to call twice at once on the same work directory
// (volumes are locked and Run fails). A Report is plain data.
package bench
