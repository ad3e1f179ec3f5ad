package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluicefs/sluice"
)

// The grids: the seeds' parameters, cut to what fits the time budget.
var (
	w1BS       = []int{512, 4096, 16384}
	w1Threads  = []int{1, 2, 4, 8, 16, 32}
	w2BS       = []int{512, 4096}
	w2Depth    = 32
	w2Policies = []enginePolicy{polClassic, without("OptimisticUnalignedWrites"), polConcurrent}
	w3Layouts  = []string{"per-submitter", "shared"}
	w4Depths   = []int{1, 2, 4, 8, 16, 32}
	w5BS       = []int{4 << 10, 32 << 10, 512 << 10}
	w5Syncs    = []bool{false, true}

	// A1 and Z1, beyond the seeds: classic, the seeds alone (the kernel's
	// locking today) and concurrent (the seeds and the two beyond them).
	a1Appenders = []int{1, 2, 4, 8, 16, 32}
	a1Modes     = []string{"direct", "buffered"} // direct first: runAppends resets counters only while idle
	a1BS        = 4096
	a1Policies  = []enginePolicy{polClassic, polSeeds, polConcurrent}
	z1BS        = 512
	z1Depth     = 32
	z1Policies  = []enginePolicy{polClassic, polSeeds, polConcurrent}
)

// The goal for A1 and Z1: concurrent / seeds, at least.
const (
	a1Goal = 3.0 // at 8 and more appenders
	z1Goal = 3.0
)

// Fixed costs of A1's and Z1's cells, for the progress estimate: making
// the file, and checking it (A1); opening the engine, fallocating and
// syncing the region (Z1).
const (
	a1EngineFixed = 40 * time.Millisecond
	a1PeerFixed   = 40 * time.Millisecond
	z1EngineFixed = 80 * time.Millisecond
)

// alternate returns pols in order on even repetitions and reversed on
// odd ones, so that a burst of load on a shared machine does not always
// hit the same policy first.
func alternate(rep int, pols []enginePolicy) []enginePolicy {
	if rep%2 == 0 {
		return pols
	}
	out := make([]enginePolicy, len(pols))
	for i, p := range pols {
		out[len(pols)-1-i] = p
	}
	return out
}

// rowSet collects an experiment's rows in the order they first appear.
type rowSet struct {
	order []string
	m     map[string]*rowAcc
}

func newRowSet() *rowSet { return &rowSet{m: map[string]*rowAcc{}} }

// acc returns the accumulator for key, making its row with mk the first
// time.
func (s *rowSet) acc(key string, mk func() Row) *rowAcc {
	a := s.m[key]
	if a == nil {
		a = &rowAcc{row: mk()}
		s.m[key] = a
		s.order = append(s.order, key)
	}
	return a
}

func (s *rowSet) rows() []Row {
	out := make([]Row, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, s.m[k].final())
	}
	return out
}

// record adds one repetition's result, or the cell's first error.
func (a *rowAcc) record(m map[string]float64, err error) {
	if err != nil {
		if a.row.Error == "" {
			a.row.Error = oneLine(err)
		}
		return
	}
	a.add(m)
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// cell runs one measured cell with progress reporting.
func (r *runner) cell(exp, desc string, est time.Duration, fn func() (map[string]float64, error)) (map[string]float64, error) {
	r.p.begin(exp, desc, est)
	m, err := fn()
	if err != nil {
		r.p.end("error: " + oneLine(err))
	} else {
		r.p.end(summary(m))
	}
	return m, err
}

// summary is a cell's one-line result.
func summary(m map[string]float64) string {
	var parts []string
	if v, ok := m["iops"]; ok {
		parts = append(parts, fmt.Sprintf("%.0f IOPS", v))
	}
	if v, ok := m["mib_s"]; ok {
		parts = append(parts, fmt.Sprintf("%.1f MiB/s", v))
	}
	if v, ok := m["device_reads"]; ok {
		parts = append(parts, fmt.Sprintf("%.0f device reads", v))
	}
	if v, ok := m["cpu_ns_per_io"]; ok {
		parts = append(parts, fmt.Sprintf("%.1f us CPU/IO", v/1000))
	}
	return strings.Join(parts, ", ")
}

// recordOptions keeps each policy's Options string in the environment.
func (r *runner) recordOptions(label string, e *engineFS) {
	if r.rep.Env.Options[label] == "" {
		r.rep.Env.Options[label] = e.options
	}
}

// engineParams are the params every engine row carries, plus extra.
func (r *runner) engineParams(v *engineVol, e *engineFS, extra map[string]any) map[string]any {
	p := map[string]any{
		"volume": v.dir, "file": v.file, "file_bytes": v.fileBytes,
		"block_size": v.blockSize, "io_unit": v.ioUnit,
		"cell_s": r.sz.Cell.Seconds(), "warmup_s": 0.0, "reps": r.sz.Reps,
	}
	if e != nil {
		p["options"], p["device"] = e.options, e.device
	}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

// peerCell runs job j on peer p: cold first if asked, with the block
// device's reads counted around it.
func (r *runner) peerCell(ctx context.Context, exp, desc string, p *peer, j sysJob, cold, both bool, est time.Duration) (map[string]float64, string, string, error) {
	var cmdline, coldHow string
	m, err := r.cell(exp, desc, est, func() (map[string]float64, error) {
		if cold {
			how, err := dropCache(j.path, r.root)
			if err != nil {
				return nil, fmt.Errorf("dropping the cache of %s: %w", j.path, err)
			}
			coldHow = how
		}
		d0 := readDiskStat(p.dev)
		res, err := p.run.run(ctx, j)
		cmdline = res.cmdline
		if err != nil {
			return nil, err
		}
		m := res.metrics(both)
		if d1 := readDiskStat(p.dev); d0.ok && d1.ok && cold {
			m["device_reads"] = float64(d1.reads - d0.reads)
			m["device_read_mib"] = float64(d1.readSectors-d0.readSectors) * 512 / (1 << 20)
			if res.writeBytes > 0 {
				m["device_reads_per_mib"] = m["device_reads"] / (float64(res.writeBytes) / (1 << 20))
			}
		}
		return m, nil
	})
	return m, cmdline, coldHow, err
}

// peerParams are the params every peer row carries, plus extra.
func (r *runner) peerParams(p *peer, cmdline, cold string, extra map[string]any) map[string]any {
	m := map[string]any{"dir": p.dir, "fstype": p.info.FSType, "runner": p.run.name(), "cmdline": cmdline,
		"cell_s": r.sz.Cell.Seconds(), "reps": r.sz.PeerReps, "device_exclusive": p.devExclusive}
	if p.info.Device != "" {
		m["device"] = p.info.Device
	}
	if cold != "" {
		m["cold"] = cold
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// peerJob is one peer cell: its job, its row and its progress label.
type peerJob struct {
	j    sysJob
	desc string
	acc  *rowAcc
}

// runPeer runs cells on peer p: one by one, or, when batch is set and
// the runner can, in one invocation (fio's fixed start-up cost, 0.5-1 s
// here, would otherwise dwarf short cells). cold drops the file's cached
// pages first: before each cell, or once before a batch, whose jobs fio
// starts with invalidate=1 (fadvise DONTNEED of the file). A batch loses
// the per-cell device counts, so experiments that report device reads
// do not batch.
func (r *runner) runPeer(ctx context.Context, exp string, p *peer, cells []peerJob, cold, both, batch bool, estEach time.Duration) {
	br, ok := p.run.(batchRunner)
	if !batch || !ok || len(cells) < 2 {
		for _, c := range cells {
			m, cmd, how, err := r.peerCell(ctx, exp, c.desc, p, c.j, cold, both, estEach)
			setPeerParams(c.acc, cmd, how)
			c.acc.record(m, err)
			if ctx.Err() != nil {
				return
			}
		}
		return
	}
	jobs := make([]sysJob, len(cells))
	for i, c := range cells {
		jobs[i] = c.j
	}
	r.p.begin(exp, fmt.Sprintf("%s: %d cells in one fio run", p.label, len(cells)), time.Duration(len(cells))*estEach)
	how := ""
	var err error
	if cold {
		if how, err = dropCache(cells[0].j.path, r.root); err == nil {
			how = "fio --invalidate=1 at each job's start (fadvise DONTNEED of the file); before the batch: " + how
		}
	}
	var res []sysResult
	var errs []error
	if err == nil {
		res, errs, err = br.runBatch(ctx, jobs)
	}
	if err != nil {
		r.p.endN(len(cells), "error: "+oneLine(err))
		for _, c := range cells {
			c.acc.record(nil, err)
		}
		return
	}
	var sums []string
	for i, c := range cells {
		setPeerParams(c.acc, res[i].cmdline, how)
		if errs[i] != nil {
			c.acc.record(nil, errs[i])
			sums = append(sums, c.desc+": error")
			continue
		}
		m := res[i].metrics(both)
		c.acc.record(m, nil)
		if exp == "W5" {
			sums = append(sums, fmt.Sprintf("%s %.1f MiB/s", strings.TrimPrefix(c.desc, p.label+" "), m["mib_s"]))
		} else {
			sums = append(sums, fmt.Sprintf("%s %.0f IOPS", strings.TrimPrefix(c.desc, p.label+" "), m["iops"]))
		}
	}
	r.p.endN(len(cells), strings.Join(sums, ", "))
}

// setPeerParams fills a peer row's cmdline (and cold method) once known.
func setPeerParams(a *rowAcc, cmdline, cold string) {
	if a.row.Params["cmdline"] == "" && cmdline != "" {
		a.row.Params["cmdline"] = cmdline
	}
	if cold != "" {
		a.row.Params["cold"] = cold
	}
}

// repeat runs an experiment's repetitions, interleaved: in repetition
// rep, engine(rep) while rep < engineReps, then peer(p) on each peer
// while rep < PeerReps. It stops as soon as ctx is done (engine and peer
// return early then) and returns the rows collected.
func (r *runner) repeat(ctx context.Context, rs *rowSet, engineReps int, engine func(rep int), peer func(p *peer)) []Row {
	for rep := 0; rep < max(engineReps, r.sz.PeerReps); rep++ {
		if rep < engineReps {
			engine(rep)
			if ctx.Err() != nil {
				return rs.rows()
			}
		}
		if rep < r.sz.PeerReps {
			for _, p := range r.peers {
				peer(p)
				if ctx.Err() != nil {
					return rs.rows()
				}
			}
		}
	}
	return rs.rows()
}

// directCell is one engine cell of an experiment that measures direct
// I/O on the main file.
type directCell struct {
	key  string
	row  func(ef *engineFS) Row // ef is nil when the engine did not open
	desc string
	run  func(ef *engineFS, f *sluice.File) (map[string]float64, error)
}

// directCells opens the main volume's engine with pol (recording its
// options) and its main file with flags|O_DIRECT, and runs cells on it,
// each estimated to take est; if either does not open, every cell
// records the error.
func (r *runner) directCells(ctx context.Context, exp string, rs *rowSet, pol enginePolicy, flags int, est time.Duration, cells []directCell) {
	ef, err := r.main.open(pol.pol)
	var f *sluice.File
	if err == nil {
		r.recordOptions(pol.label, ef)
		if f, err = ef.fs.OpenFile(r.main.file, flags|sluice.O_DIRECT, 0); err != nil {
			ef.close()
			ef = nil
		}
	}
	for _, c := range cells {
		if err == nil && ctx.Err() != nil {
			break
		}
		a := rs.acc(c.key, func() Row { return c.row(ef) })
		if err != nil {
			a.record(nil, err)
			continue
		}
		a.record(r.cell(exp, c.desc, est, func() (map[string]float64, error) { return c.run(ef, f) }))
	}
	if err != nil {
		return
	}
	f.Close()
	if err := ef.close(); err != nil {
		r.note("%s: closing the engine: %v", exp, err)
	}
}

// W1 (seed 001): O_DIRECT sequential reads of one file.
func (r *runner) w1(ctx context.Context) Experiment {
	sz := r.sz
	e := Experiment{ID: "W1", Seed: "001", Title: "seqrd: O_DIRECT sequential reads of one file by 1-32 readers",
		SeedNumbers: seed001Caption,
		Workload: fmt.Sprintf("One fully written %d MiB file; N readers each read their own 1/N of it sequentially with O_DIRECT, bs at a time (wrapping at its end). "+
			"Engine: one goroutine per reader calling File.ReadAt on one O_DIRECT File. Peers: fio --rw=read --direct=1 --ioengine=psync --numjobs=N --offset_increment=size/N, every cell a stonewalled job of one fio run (fio's ramp_time is the warm-up). "+
			"%v measured after %v of warm-up, median of %d runs (peers: %d).", sz.DataBytes>>20, sz.Cell, sz.Warmup, sz.Reps, sz.PeerReps),
		Notes: []string{"Classic takes the I/O lock exclusive for every direct read and waits for in-flight direct I/O (the 2011 kernel); concurrent takes it shared (seed 001's fix). No other seed toggle affects direct reads, so classic vs concurrent isolates seed 001."},
	}
	rs := newRowSet()
	e.Rows = r.repeat(ctx, rs, sz.Reps, func(rep int) {
		for _, pol := range alternate(rep, []enginePolicy{polClassic, polConcurrent}) {
			var cells []directCell
			for _, bs := range w1BS {
				for _, n := range w1Threads {
					cells = append(cells, directCell{
						key: fmt.Sprintf("engine|%s|%d|%d", pol.label, bs, n),
						row: func(ef *engineFS) Row {
							return Row{Target: TargetEngine, Policy: pol.label, Params: r.engineParams(r.main, ef, map[string]any{
								"bs": bs, "threads": n, "region_bytes": sz.DataBytes / int64(n) / int64(bs) * int64(bs),
								"warmup_s": sz.Warmup.Seconds(),
								"workload": fmt.Sprintf("W1 engine: %d goroutines x File.ReadAt(%d B) sequential in own region, O_DIRECT", n, bs)})}
						},
						desc: fmt.Sprintf("engine %s bs=%d threads=%d (run %d/%d)", pol.label, bs, n, rep+1, sz.Reps),
						run: func(ef *engineFS, f *sluice.File) (map[string]float64, error) {
							return runSeqReads(ctx, ef, f, r.main.fileBytes, bs, n, sz.Warmup, sz.Cell)
						},
					})
				}
			}
			r.directCells(ctx, "W1", rs, pol, sluice.O_RDONLY, r.cellEst(true, 20*time.Millisecond), cells)
			if ctx.Err() != nil {
				return
			}
		}
	}, func(p *peer) {
		var cells []peerJob
		for _, bs := range w1BS {
			for _, n := range w1Threads {
				region := sz.DataBytes / int64(n) / int64(bs) * int64(bs)
				j := sysJob{name: fmt.Sprintf("w1-bs%d-n%d", bs, n), rw: "read", path: p.data, direct: true, ioengine: "psync", bs: bs, numjobs: n, iodepth: 1,
					size: region, offsetInc: region, runtime: sz.Cell, ramp: sz.Warmup, timeBased: true}
				a := rs.acc(fmt.Sprintf("%s|%d|%d", p.label, bs, n), func() Row {
					return Row{Target: p.label, Policy: PolicyPeer, Params: r.peerParams(p, "", "", map[string]any{
						"bs": bs, "threads": n, "region_bytes": region, "warmup_s": sz.Warmup.Seconds()})}
				})
				cells = append(cells, peerJob{j, fmt.Sprintf("%s bs=%d threads=%d", p.label, bs, n), a})
			}
		}
		r.runPeer(ctx, "W1", p, cells, false, false, true, r.cellEst(true, r.peerFixed(false)))
	})
	return e
}

// W2 (seed 000): random read/write O_DIRECT at depth 32, 512 B and 4 KiB.
func (r *runner) w2(ctx context.Context) Experiment {
	sz := r.sz
	e := Experiment{ID: "W2", Seed: "000", Title: "randrw O_DIRECT at queue depth 32 on a fully written file, 512 B and 4 KiB",
		SeedNumbers: seed000Caption,
		Workload: fmt.Sprintf("One fully written %d MiB file; random bs-aligned offsets, 50%% reads / 50%% writes, O_DIRECT, %d I/Os in flight. "+
			"Engine: %d goroutines, each with one File.ReadAt/WriteAt in flight (not the ring: its per-inode hashing of punted writes would mix seed 002's effect into this one). "+
			"Peers: fio --rw=randrw --direct=1 --ioengine=libaio --iodepth=32 (one job). %v measured after %v of warm-up, median of %d runs (peers: %d).",
			sz.DataBytes>>20, w2Depth, w2Depth, sz.Cell, sz.Warmup, sz.Reps, sz.PeerReps),
		Notes: []string{"The engine volume has 4 KiB blocks and a 512 B device I/O unit, so 512 B writes are sub-block writes. " +
			"Classic: every sub-block write exclusive + drain, and every direct read exclusive (seed 001's toggle is off too). " +
			"'concurrent w/o 000' is the concurrent policy with only OptimisticUnalignedWrites off: seed 000's own before/after, with shared direct reads as in the 2021 kernel."},
	}
	rs := newRowSet()
	e.Rows = r.repeat(ctx, rs, sz.Reps, func(rep int) {
		for _, pol := range alternate(rep, w2Policies) {
			var cells []directCell
			for _, bs := range w2BS {
				cells = append(cells, directCell{
					key: fmt.Sprintf("engine|%s|%d", pol.label, bs),
					row: func(ef *engineFS) Row {
						return Row{Target: TargetEngine, Policy: pol.label, Params: r.engineParams(r.main, ef, map[string]any{
							"bs": bs, "depth": w2Depth, "policy_fields": pol.pol.String(), "warmup_s": sz.Warmup.Seconds(),
							"workload": fmt.Sprintf("W2 engine: %d goroutines x random File.ReadAt/WriteAt(%d B) 50/50, O_DIRECT", w2Depth, bs)})}
					},
					desc: fmt.Sprintf("engine %s bs=%d QD%d (run %d/%d)", pol.label, bs, w2Depth, rep+1, sz.Reps),
					run: func(ef *engineFS, f *sluice.File) (map[string]float64, error) {
						return runRandRW(ctx, ef, f, r.main.fileBytes, bs, w2Depth, sz.Warmup, sz.Cell)
					},
				})
			}
			r.directCells(ctx, "W2", rs, pol, sluice.O_RDWR, r.cellEst(true, 20*time.Millisecond), cells)
			if ctx.Err() != nil {
				return
			}
		}
	}, func(p *peer) {
		var cells []peerJob
		for _, bs := range w2BS {
			j := sysJob{name: fmt.Sprintf("w2-bs%d", bs), rw: "randrw", path: p.data, direct: true, ioengine: "libaio", bs: bs, numjobs: 1, iodepth: w2Depth,
				size: sz.DataBytes, runtime: sz.Cell, ramp: sz.Warmup, timeBased: true}
			a := rs.acc(fmt.Sprintf("%s|%d", p.label, bs), func() Row {
				return Row{Target: p.label, Policy: PolicyPeer, Params: r.peerParams(p, "", "", map[string]any{
					"bs": bs, "depth": w2Depth, "warmup_s": sz.Warmup.Seconds()})}
			})
			cells = append(cells, peerJob{j, fmt.Sprintf("%s bs=%d QD%d", p.label, bs, w2Depth), a})
		}
		r.runPeer(ctx, "W2", p, cells, false, true, true, r.cellEst(true, r.peerFixed(false)))
	})
	return e
}

// W3 (seed 002): 8 submitters x depth 8 random 4 KiB O_DIRECT writes to
// one file through the ring, every write punted: hashed vs parallel.
func (r *runner) w3(ctx context.Context) Experiment {
	sz := r.sz
	e := Experiment{ID: "W3", Seed: "002", Title: "8 submitters x depth 8, 4 KiB O_DIRECT random writes to one file, forced punting: hashed vs parallel",
		SeedNumbers: seed002Caption,
		Workload: fmt.Sprintf("One fully written %d MiB file; 8 submitters each keep 8 random 4 KiB O_DIRECT writes in flight through the ring "+
			"(ring.Ring driven by bench.ringRandomWrites, ForceAsync: every write goes to the worker pool, as io_uring's IOSQE_ASYNC). "+
			"'per-submitter': each submitter has its own ring and pool (as each fio job has its own io-wq), so hashing serialises each submitter's writes; "+
			"'shared': one ring for all, so hashing serialises every write to the file. Peers: fio --ioengine=io_uring --force_async=1 --numjobs=8 --iodepth=8 --rw=randwrite --direct=1 --bs=4k "+
			"(XFS and ext4 flag O_DIRECT files for parallel writes, so io_uring does not hash them). %v measured after a %v warm-up run, median of %d runs (peers: %d).",
			sz.DataBytes>>20, sz.Cell, sz.Warmup, sz.Reps, sz.PeerReps),
		Notes: []string{"Classic = hashed (ParallelDirectWrites off), concurrent = parallel. Aligned writes within EOF take the I/O lock shared under both, so no other toggle matters here."},
	}
	rs := newRowSet()
	e.Rows = r.repeat(ctx, rs, sz.Reps, func(rep int) {
		for _, pol := range alternate(rep, []enginePolicy{polClassic, polConcurrent}) {
			ef, err := r.main.open(pol.pol)
			if err == nil {
				r.recordOptions(pol.label, ef)
			}
			for _, layout := range w3Layouts {
				o := ringWriteOptions{Submitters: 8, Depth: 8, BlockSize: 4096, Duration: sz.Cell, RingPerSubmitter: layout == "per-submitter"}
				var ostr string
				a := rs.acc(fmt.Sprintf("engine|%s|%s", pol.label, layout), func() Row {
					return Row{Target: TargetEngine, Policy: pol.label, Params: r.engineParams(r.main, ef, map[string]any{
						"rings": layout, "submitters": 8, "depth": 8, "bs": 4096, "warmup_s": sz.Warmup.Seconds()})}
				})
				if err != nil {
					a.record(nil, err)
					continue
				}
				desc := fmt.Sprintf("engine %s ring %s (run %d/%d)", pol.label, layout, rep+1, sz.Reps)
				a.record(r.cell("W3", desc, r.cellEst(true, 60*time.Millisecond), func() (map[string]float64, error) {
					m, s, err := runRingWrites(ef, r.main.file, o, sz.Warmup)
					ostr = s
					return m, err
				}))
				if ostr != "" {
					a.row.Params["workload"] = "bench.ringRandomWrites " + ostr
				}
				if ctx.Err() != nil {
					break
				}
			}
			if ef != nil {
				if err := ef.close(); err != nil {
					r.note("W3: closing the engine: %v", err)
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
	}, func(p *peer) {
		j := sysJob{name: "w3", rw: "randwrite", path: p.data, direct: true, ioengine: "io_uring", forceAsync: true, bs: 4096, numjobs: 8, iodepth: 8,
			size: sz.DataBytes, runtime: sz.Cell, ramp: sz.Warmup, timeBased: true}
		a := rs.acc(p.label, func() Row {
			return Row{Target: p.label, Policy: PolicyPeer, Params: r.peerParams(p, "", "", map[string]any{
				"rings": "per-submitter", "submitters": 8, "depth": 8, "bs": 4096, "warmup_s": sz.Warmup.Seconds()})}
		})
		r.runPeer(ctx, "W3", p, []peerJob{{j, p.label + " io_uring 8x8", a}}, false, false, true, r.cellEst(true, r.peerFixed(false)))
	})
	return e
}

// W4 (seed 003): random 4 KiB buffered reads of a cold file through the
// ring at depth 1-32.
func (r *runner) w4(ctx context.Context) Experiment {
	sz := r.sz
	e := Experiment{ID: "W4", Seed: "003", Title: "random 4 KiB buffered reads of a cold file through the ring, depth 1-32",
		SeedNumbers: seed003Caption,
		Workload: fmt.Sprintf("One %d MiB file, cold (engine: a fresh sluice.Open per cell, page cache %d MiB); one submitter keeps D random 4 KiB buffered reads in flight through one ring "+
			"(ring.Ring driven by bench.ringRandomReads, pool of D workers). CPU per I/O is the process's getrusage user+system time over the cell divided by the reads; "+
			"peak goroutines are the process's (goroutines_base: before the cell), peak blocked workers the ring's. "+
			"Peers: fio --rw=randread --direct=0 --ioengine=io_uring --iodepth=D --bs=4k --randseed=89, the depths as jobs of one fio run, each starting with --invalidate=1 (the file's cached pages dropped), "+
			"and the page cache dropped before the run (root); their CPU is fio's per-job usr_cpu+sys_cpu (kernel io_uring workers included, fio's start-up not). "+
			"%v per cell, no warm-up (it would warm the cache), median of %d runs (peers: %d).", sz.DataBytes>>20, sluice.DefaultCacheSizeBytes>>20, sz.Cell, sz.Reps, sz.PeerReps),
		Notes: []string{"Classic punts a read that meets a page under I/O to a worker that blocks on it; concurrent arms a retry on the page's unlock (seed 003). No other toggle affects buffered reads.",
			"The file is larger than the engine's page cache only in the full sizing; a cell's reads cover a small part of it, so most reads miss (cache_hit_pct)."},
	}
	rs := newRowSet()
	e.Rows = r.repeat(ctx, rs, sz.Reps, func(rep int) {
		for _, d := range w4Depths {
			for _, pol := range alternate(rep+d, []enginePolicy{polClassic, polConcurrent}) {
				base := goroutines()
				ef, err := r.main.open(pol.pol)
				a := rs.acc(fmt.Sprintf("engine|%s|%d", pol.label, d), func() Row {
					return Row{Target: TargetEngine, Policy: pol.label, Params: r.engineParams(r.main, ef, map[string]any{
						"depth": d, "bs": 4096, "cold": "fresh sluice.Open (empty page cache)"})}
				})
				if err != nil {
					a.record(nil, err)
					continue
				}
				r.recordOptions(pol.label, ef)
				var ostr string
				desc := fmt.Sprintf("engine %s QD%d cold (run %d/%d)", pol.label, d, rep+1, sz.Reps)
				a.record(r.cell("W4", desc, r.cellEst(false, 40*time.Millisecond), func() (map[string]float64, error) {
					m, s, err := runRingReads(ef, r.main.file, ringReadOptions{Depth: d, BlockSize: 4096, Duration: sz.Cell}, base)
					ostr = s
					return m, err
				}))
				if ostr != "" {
					a.row.Params["workload"] = "bench.ringRandomReads " + ostr
				}
				if err := ef.close(); err != nil {
					r.note("W4: closing the engine: %v", err)
				}
				if ctx.Err() != nil {
					return
				}
			}
		}
	}, func(p *peer) {
		var cells []peerJob
		for _, d := range w4Depths {
			j := sysJob{name: fmt.Sprintf("w4-qd%d", d), rw: "randread", path: p.data, direct: false, ioengine: "io_uring", bs: 4096, numjobs: 1, iodepth: d,
				size: sz.DataBytes, runtime: sz.Cell, timeBased: true, randseed: 89}
			a := rs.acc(fmt.Sprintf("%s|%d", p.label, d), func() Row {
				return Row{Target: p.label, Policy: PolicyPeer, Params: r.peerParams(p, "", "", map[string]any{"depth": d, "bs": 4096})}
			})
			cells = append(cells, peerJob{j, fmt.Sprintf("%s QD%d cold", p.label, d), a})
		}
		r.runPeer(ctx, "W4", p, cells, true, false, true, r.cellEst(false, r.peerFixed(true)))
	})
	return e
}

// W5 (seed 004): buffered and O_SYNC sequential overwrite of an existing,
// uncached file, on a 4 KiB and a 64 KiB device I/O unit.
func (r *runner) w5(ctx context.Context) Experiment {
	sz := r.sz
	e := Experiment{ID: "W5", Seed: "004", Title: "buffered and O_SYNC overwrite of an existing uncached file, 4 KiB and 64 KiB device I/O units",
		SeedNumbers: seed004Caption,
		Workload: fmt.Sprintf("A fully written %d MiB file, uncached (engine: a fresh sluice.Open per cell), overwritten sequentially from offset 0 with buffered File.WriteAt of bs (O_SYNC or not) "+
			"until its end or %v, then fsynced; MiB/s counts the fsync (as fio's end_fsync=1). Device reads = CacheReads (pages read before a write) + CacheRMWUnitReads (I/O units read back at writeback). "+
			"Volumes: 4 KiB blocks with a 4 KiB I/O unit, and 64 KiB blocks with a 64 KiB I/O unit (block-granular, the pNFS block-layout case); the page is 4 KiB on both. "+
			"Peers: fio --rw=write --direct=0 --ioengine=psync --bs=B [--sync=1] --end_fsync=1 --size=%dm --invalidate=1, after dropping caches; on a device the run made (kernel peers) each cell is its own fio run "+
			"and its device reads are the device's completed reads (/sys/dev/block/*/stat) during the cell; elsewhere the disk is shared, its counts meaningless, and the cells run as jobs of one fio run. "+
			"No warm-up (the file must be uncached); median of %d runs (peers: %d).", sz.W5Bytes>>20, sz.Cell, sz.W5Bytes>>20, sz.W5Reps, sz.PeerReps),
		Notes: []string{"Classic reads every page that is not up to date before writing it (the 4.20 pNFS client); concurrent skips the read when the write covers the page's bytes below EOF or a write of the page is pending (seed 004). No other toggle affects buffered writes."},
	}
	rs := newRowSet()
	e.Rows = r.repeat(ctx, rs, sz.W5Reps, func(rep int) {
		for _, v := range []*engineVol{r.u4k, r.u64k} {
			for _, sync := range w5Syncs {
				for i, bs := range w5BS {
					for _, pol := range alternate(rep+i, []enginePolicy{polClassic, polConcurrent}) {
						ef, err := v.open(pol.pol)
						a := rs.acc(fmt.Sprintf("engine|%s|%d|%t|%d", pol.label, v.ioUnit, sync, bs), func() Row {
							return Row{Target: TargetEngine, Policy: pol.label, Params: r.engineParams(v, ef, map[string]any{
								"bs": bs, "sync": sync, "reps": sz.W5Reps, "cold": "fresh sluice.Open (empty page cache)",
								"workload": fmt.Sprintf("W5 engine: sequential buffered File.WriteAt(%d B) from 0 (O_SYNC=%t) until EOF or %v, then Fsync", bs, sync, sz.Cell)})}
						})
						if err != nil {
							a.record(nil, err)
							continue
						}
						desc := fmt.Sprintf("engine %s unit=%dK %s bs=%dK (run %d/%d)", pol.label, v.ioUnit>>10, syncName(sync), bs>>10, rep+1, sz.W5Reps)
						a.record(r.cell("W5", desc, r.cellEst(false, sz.Cell/4+60*time.Millisecond), func() (map[string]float64, error) {
							return runOverwrite(ctx, ef, v.file, v.fileBytes, bs, sync, sz.Cell)
						}))
						if err := ef.close(); err != nil {
							r.note("W5: closing the engine: %v", err)
						}
						if ctx.Err() != nil {
							return
						}
					}
				}
			}
		}
	}, func(p *peer) {
		var cells []peerJob
		for _, sync := range w5Syncs {
			for _, bs := range w5BS {
				j := sysJob{name: fmt.Sprintf("w5-%s-bs%d", syncName(sync), bs), rw: "write", path: p.w5, direct: false, ioengine: "psync", bs: bs, numjobs: 1, iodepth: 1,
					size: sz.W5Bytes, runtime: sz.Cell, sync: sync, endFsync: true}
				a := rs.acc(fmt.Sprintf("%s|%t|%d", p.label, sync, bs), func() Row {
					return Row{Target: p.label, Policy: PolicyPeer, Params: r.peerParams(p, "", "", map[string]any{"bs": bs, "sync": sync})}
				})
				cells = append(cells, peerJob{j, fmt.Sprintf("%s %s bs=%dK", p.label, syncName(sync), bs>>10), a})
			}
		}
		// Device reads are only worth counting per cell on a
		// device of the run's own; elsewhere batch the cells.
		r.runPeer(ctx, "W5", p, cells, true, false, !p.devExclusive, r.cellEst(false, sz.Cell/4+r.peerFixed(true)))
	})
	return e
}

func syncName(sync bool) string {
	if sync {
		return "O_SYNC"
	}
	return "plain"
}

// a1Peer is peer p for A1, whose appends run through the Go runner
// whatever runs the other experiments' peers: fio has no O_APPEND (its
// file_append only starts each job at the end of the file, and its jobs
// write precomputed offsets with pwrite). The raw peer is relabelled
// after its runner ("go:raw").
func a1Peer(p *peer) *peer {
	ap := *p
	ap.run = goRunner{}
	if strings.HasSuffix(p.label, ":raw") {
		ap.label = ap.run.name() + ":raw"
	}
	return &ap
}

func modeName(mode string) string {
	if mode == "direct" {
		return "O_DIRECT"
	}
	return "buffered"
}

// A1 (beyond the seeds): 1-32 appenders of 4 KiB records to one file,
// O_DIRECT and buffered.
func (r *runner) a1(ctx context.Context) Experiment {
	sz := r.sz
	e := Experiment{ID: "A1", Title: "appends: 1-32 appenders of 4 KiB records to one file, O_DIRECT and buffered",
		Goal: fmt.Sprintf("Issue 16: concurrent (ParallelAppends: appends reserve their range and write in parallel) / seeds (every append takes the I/O lock exclusive, as XFS buffered, ext4 and FUSE do) >= %.0fx appends/s at 8 and more appenders.", a1Goal),
		Workload: fmt.Sprintf("N appenders write 4 KiB records to one file that starts empty, each through its own open file: opened O_WRONLY|O_APPEND, and O_DIRECT with aligned buffers (device.AlignedBuf) or buffered. "+
			"Engine: N goroutines, each with its own sluice.File, calling File.Write (one File shared by all would serialise them on its position lock, as write(2) does on one shared descriptor). "+
			"Peers: the built-in Go runner, N goroutines each with its own descriptor opened O_APPEND, write(2) of 4 KiB (fio cannot: it has no O_APPEND; --file_append=1 only starts each job at the end of the file, then writes precomputed offsets with pwrite, so N jobs on one file are not N appenders). "+
			"Each record carries its appender and sequence number at both ends; after each cell the file is checked: its size is exactly the records written times 4 KiB, and every record is there once and whole, or the cell is an error. "+
			"A cell stops after %v (after %v of warm-up, counted in the file but not in the rate) or when its records fill %d MiB; the file is made afresh for each cell and removed after it. Median of %d runs (peers: %d).",
			sz.Cell, sz.Warmup, sz.A1Bytes>>20, sz.Reps, sz.PeerReps),
		Notes: []string{"Classic and seeds take the I/O lock exclusive for every append (no seed changes appends); concurrent adds ParallelAppends. " +
			"excl_lock_frac is the share of appends that took the lock exclusive; max_in_flight (O_DIRECT) the most direct writes in flight on the file at once over the cell: 1 while appends are exclusive.",
			"go:raw is the raw peer's directory (the work directory's own file system) under the Go runner."},
	}
	rs := newRowSet()
	e.Rows = r.repeat(ctx, rs, sz.Reps, func(rep int) {
		for _, pol := range alternate(rep, a1Policies) {
			ef, err := r.az.open(pol.pol)
			if err == nil {
				r.recordOptions(pol.label, ef)
			}
		cells:
			for _, mode := range a1Modes {
				for _, n := range a1Appenders {
					a := rs.acc(fmt.Sprintf("engine|%s|%s|%d", pol.label, mode, n), func() Row {
						return Row{Target: TargetEngine, Policy: pol.label, Params: r.engineParams(r.az, ef, map[string]any{
							"mode": mode, "appenders": n, "bs": a1BS, "file": "/a1", "file_bytes": sz.A1Bytes,
							"policy_fields": pol.pol.String(), "warmup_s": sz.Warmup.Seconds(),
							"workload": fmt.Sprintf("A1 engine: %d goroutines x File.Write(%d B) on own File opened O_WRONLY|O_APPEND (%s), until %v or %d MiB, then verified", n, a1BS, modeName(mode), sz.Cell, sz.A1Bytes>>20)})}
					})
					if err != nil {
						a.record(nil, err)
						continue
					}
					desc := fmt.Sprintf("engine %s %s appenders=%d (run %d/%d)", pol.label, modeName(mode), n, rep+1, sz.Reps)
					a.record(r.cell("A1", desc, r.cellEst(true, a1EngineFixed), func() (map[string]float64, error) {
						return runAppends(ctx, ef, "/a1", mode == "direct", n, a1BS, sz.A1Bytes, sz.Warmup, sz.Cell)
					}))
					if ctx.Err() != nil {
						break cells
					}
				}
			}
			if ef != nil {
				if err := ef.close(); err != nil {
					r.note("A1: closing the engine: %v", err)
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
	}, func(p *peer) {
		ap := a1Peer(p)
		var cells []peerJob
		for _, mode := range a1Modes {
			for _, n := range a1Appenders {
				j := sysJob{name: fmt.Sprintf("a1-%s-n%d", mode, n), rw: "append", path: p.a1, direct: mode == "direct", ioengine: "psync", bs: a1BS,
					numjobs: n, iodepth: 1, size: sz.A1Bytes, runtime: sz.Cell, ramp: sz.Warmup}
				a := rs.acc(fmt.Sprintf("%s|%s|%d", ap.label, mode, n), func() Row {
					return Row{Target: ap.label, Policy: PolicyPeer, Params: r.peerParams(ap, "", "", map[string]any{
						"mode": mode, "appenders": n, "bs": a1BS, "file_bytes": sz.A1Bytes, "warmup_s": sz.Warmup.Seconds()})}
				})
				cells = append(cells, peerJob{j, fmt.Sprintf("%s %s appenders=%d", ap.label, modeName(mode), n), a})
			}
		}
		r.runPeer(ctx, "A1", ap, cells, false, false, false, r.cellEst(true, a1PeerFixed))
	})
	return e
}

// Z1 (beyond the seeds): 512 B O_DIRECT random writes at depth 32 into
// a fallocated file that was never written.
func (r *runner) z1(ctx context.Context) Experiment {
	sz := r.sz
	e := Experiment{ID: "Z1", Title: "fresh-file sub-block writes: 512 B O_DIRECT random writes at QD32 into a fallocated, never written file",
		Goal: fmt.Sprintf("Issue 16: concurrent (BlockRangeExclusion: a sub-block write that must zero part of a block locks only that block) / seeds (seed 000's fallback: the I/O lock exclusive and a drain of every direct I/O of the file) >= %.0fx IOPS.", z1Goal),
		Workload: fmt.Sprintf("A file of %d MiB is fallocated (mode 0: unwritten extents, size set) and never written, afresh for each cell; then %d writes of %d B are kept in flight with O_DIRECT, each at a random %d B-aligned place, so that each lands in an unwritten extent and must zero the rest of its block. "+
			"Engine: %d goroutines, each with one File.WriteAt in flight (as W2), on a volume of 4 KiB blocks and a 512 B I/O unit; every write goes to a block not written before (the blocks in a random order, a random slot in each), "+
			"and the cell stops after %v (after %v of warm-up) or when every block is written (converted_frac is the share of the region's blocks written by the cell's end); afterwards up to 256 of the written blocks are read back: the write in its slot, zeros around it. "+
			"Peers: fio --rw=randwrite --bs=%d --direct=1 --ioengine=libaio --iodepth=%d --size=%dm --fallocate=native on a file removed before the cell, which fio then creates and fallocates (fallocate(fd, 0, 0, size)) and does not lay out (a write job without --overwrite=1 writes nothing before its own I/O); "+
			"fio's random map (no --norandommap) writes no 512 B block twice, but 8 of them share a 4 KiB file-system block, so a small share of its writes (about 7 times the share of the region written) land in a block already converted. "+
			"Median of %d runs (peers: %d).",
			sz.Z1Bytes>>20, z1Depth, z1BS, z1BS, z1Depth, sz.Cell, sz.Warmup, z1BS, z1Depth, sz.Z1Bytes>>20, sz.Reps, sz.PeerReps),
		Notes: []string{"Classic takes every sub-block write exclusive with a drain; seeds tries the shared overwrite-only route first (seed 000), which fails on an unwritten extent (eagain_retries_per_write), then falls back to exclusive + drain; concurrent adds BlockRangeExclusion. " +
			"XFS and ext4 both take the fallback route for such writes. max_in_flight is the most direct writes in flight on the file at once: 1 under the fallback."},
	}
	rs := newRowSet()
	e.Rows = r.repeat(ctx, rs, sz.Reps, func(rep int) {
		for _, pol := range alternate(rep, z1Policies) {
			ef, err := r.az.open(pol.pol)
			a := rs.acc("engine|"+pol.label, func() Row {
				return Row{Target: TargetEngine, Policy: pol.label, Params: r.engineParams(r.az, ef, map[string]any{
					"bs": z1BS, "depth": z1Depth, "file": "/z1", "file_bytes": sz.Z1Bytes, "region_bytes": sz.Z1Bytes,
					"policy_fields": pol.pol.String(), "warmup_s": sz.Warmup.Seconds(),
					"fresh":    "sluice.FS.OpenFile(O_CREAT|O_EXCL) + File.Fallocate(0, 0, region) + Fsync before the cell",
					"workload": fmt.Sprintf("Z1 engine: %d goroutines x File.WriteAt(%d B), O_DIRECT, each in a block not written before, until %v or every block written", z1Depth, z1BS, sz.Cell)})}
			})
			if err != nil {
				a.record(nil, err)
				continue
			}
			r.recordOptions(pol.label, ef)
			desc := fmt.Sprintf("engine %s bs=%d QD%d fresh file (run %d/%d)", pol.label, z1BS, z1Depth, rep+1, sz.Reps)
			a.record(r.cell("Z1", desc, r.cellEst(true, z1EngineFixed), func() (map[string]float64, error) {
				return runFreshSubBlock(ctx, ef, "/z1", sz.Z1Bytes, z1BS, z1Depth, sz.Warmup, sz.Cell, uint64(rep+1))
			}))
			if err := ef.close(); err != nil {
				r.note("Z1: closing the engine: %v", err)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}, func(p *peer) {
		j := sysJob{name: "z1", rw: "randwrite", path: p.z1, direct: true, ioengine: "libaio", bs: z1BS, numjobs: 1, iodepth: z1Depth,
			size: sz.Z1Bytes, runtime: sz.Cell, ramp: sz.Warmup, timeBased: true, fresh: true, randseed: 61}
		a := rs.acc(p.label, func() Row {
			return Row{Target: p.label, Policy: PolicyPeer, Params: r.peerParams(p, "", "", map[string]any{
				"bs": z1BS, "depth": z1Depth, "region_bytes": sz.Z1Bytes, "warmup_s": sz.Warmup.Seconds()})}
		})
		// The runner makes the file: an old one must not be reused.
		if err := os.Remove(p.z1); err != nil && !os.IsNotExist(err) {
			a.record(nil, err)
			return
		}
		r.runPeer(ctx, "Z1", p, []peerJob{{j, fmt.Sprintf("%s bs=%d QD%d fresh file", p.label, z1BS, z1Depth), a}}, false, false, false, r.cellEst(true, r.peerFixed(false)))
		if err := os.Remove(p.z1); err != nil && !os.IsNotExist(err) {
			r.note("Z1: removing %s: %v", p.z1, err)
		}
	})
	return e
}
