package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sluicefs/sluice/internal/harness/fio"
)

// runner is one Run in progress.
type runner struct {
	cfg  Config
	sz   Sizing
	p    *progress
	rep  *Report
	root bool

	work    string
	tmpWork bool // work is removed at the end
	keep    bool // volumes and prepared files are kept for reuse

	main, u4k, u64k *engineVol
	az              *engineVol // A1's and Z1's volume (files made per cell)
	peers           []*peer
	sys             sysRunner

	// cleanups run at the end, last first.
	cleanups []func() error
}

// Run runs the experiments cfg asks for and returns the report. It
// makes (and at the end removes) whatever volumes, images, loop devices
// and files it needs. A cell that fails is reported in its row and the
// run goes on; set-up failures and ctx's end stop the run.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	start := time.Now()
	if cfg.Sizing.Name == "" {
		cfg.Sizing = Full
	}
	r := &runner{cfg: cfg, sz: cfg.Sizing, root: os.Geteuid() == 0}
	r.p = newProgress(cfg.Progress, cfg.Live)
	defer r.p.close()
	r.rep = &Report{}
	env := &r.rep.Env
	env.Command = cfg.Command
	env.Started = start.Format(time.RFC3339)
	sz := r.sz
	env.Sizing, env.DataBytes, env.W5Bytes = sz.Name, sz.DataBytes, sz.W5Bytes
	env.A1Bytes, env.Z1Bytes = sz.A1Bytes, sz.Z1Bytes
	env.CellSeconds, env.WarmupSeconds = sz.Cell.Seconds(), sz.Warmup.Seconds()
	env.Reps, env.W5Reps, env.PeerReps = sz.Reps, sz.W5Reps, sz.PeerReps
	env.Options = map[string]string{}
	hostEnv(env)
	env.LoadAvgStart = loadAvg()
	tot0, idle0 := cpuTimes()
	own0 := ownCPU()

	defer func() {
		for i := len(r.cleanups) - 1; i >= 0; i-- {
			if cerr := r.cleanups[i](); cerr != nil {
				env.Notes = append(env.Notes, "clean-up: "+cerr.Error())
				if err == nil {
					err = fmt.Errorf("clean-up: %w", cerr)
				}
			}
		}
		env.WallSeconds = time.Since(start).Seconds()
		env.LoadAvgEnd = loadAvg()
		if tot1, idle1 := cpuTimes(); tot1 > tot0 {
			all := float64(tot1 - tot0)
			busy := all - float64(idle1-idle0)
			env.MachineBusyPct = 100 * busy / all
			own := (ownCPU() - own0).Seconds() * clockTicks
			env.OthersBusyPct = max(0, 100*(busy-own)/all)
		}
	}()

	if err := r.checkConfig(); err != nil {
		return r.rep, err
	}
	if err := r.setupWork(); err != nil {
		return r.rep, err
	}
	env.Device = describeDevice(r.work)
	r.setupRunner()
	if err := r.setupVolumes(ctx); err != nil {
		return r.rep, err
	}
	if err := r.setupPeers(ctx); err != nil {
		return r.rep, err
	}
	r.plan()

	exps := []struct {
		id  string
		run func(context.Context) Experiment
	}{{"W1", r.w1}, {"W2", r.w2}, {"W3", r.w3}, {"W4", r.w4}, {"W5", r.w5}, {"A1", r.a1}, {"Z1", r.z1}}
	for _, x := range exps {
		if !cfg.wants(x.id) {
			continue
		}
		e := x.run(ctx)
		r.rep.Experiments = append(r.rep.Experiments, e)
		if err := ctx.Err(); err != nil {
			return r.rep, err
		}
	}
	return r.rep, nil
}

func (r *runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.rep.Env.Notes = append(r.rep.Env.Notes, msg)
	r.p.note("%s", msg)
}

func (r *runner) needData() bool {
	return r.cfg.wants("W1") || r.cfg.wants("W2") || r.cfg.wants("W3") || r.cfg.wants("W4")
}

func (r *runner) needW5() bool { return r.cfg.wants("W5") }

func (r *runner) needAZ() bool { return r.cfg.wants("A1") || r.cfg.wants("Z1") }

// azBytes is the most that A1 or Z1 keeps in one file at once (each
// cell removes its file at the end).
func (r *runner) azBytes() int64 {
	var n int64
	if r.cfg.wants("A1") {
		n = r.sz.A1Bytes
	}
	if r.cfg.wants("Z1") {
		n = max(n, r.sz.Z1Bytes)
	}
	return n
}

func (r *runner) checkConfig() error {
	sz := r.sz
	var errs []error
	mib := func(n int64) bool { return n >= 1<<20 && n%(1<<20) == 0 }
	if !mib(sz.DataBytes) || !mib(sz.W5Bytes) || !mib(sz.A1Bytes) || !mib(sz.Z1Bytes) {
		errs = append(errs, fmt.Errorf("file sizes must be positive multiples of 1 MiB (data %d, w5 %d, a1 %d, z1 %d)", sz.DataBytes, sz.W5Bytes, sz.A1Bytes, sz.Z1Bytes))
	}
	if sz.Cell <= 0 || sz.Warmup < 0 || sz.Reps < 1 || sz.W5Reps < 1 || sz.PeerReps < 1 {
		errs = append(errs, fmt.Errorf("cell time %v, warm-up %v and repetitions (%d, %d, %d) must be positive", sz.Cell, sz.Warmup, sz.Reps, sz.W5Reps, sz.PeerReps))
	}
	for _, t := range r.cfg.Targets {
		st, err := os.Stat(t)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--target %s: %w", t, err))
		case !st.IsDir():
			errs = append(errs, fmt.Errorf("--target %s is not a directory", t))
		}
	}
	if r.cfg.KernelPeers {
		if err := checkKernelPeerTools(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setupWork chooses the work directory (see Config.Volume).
func (r *runner) setupWork() error {
	v := r.cfg.Volume
	isVolume := false
	if v != "" {
		_, e1 := os.Stat(filepath.Join(v, "data"))
		_, e2 := os.Stat(filepath.Join(v, "meta"))
		isVolume = e1 == nil && e2 == nil
	}
	switch {
	case v == "" || isVolume:
		parent := r.cfg.WorkParent
		if parent == "" {
			parent = "."
		}
		if isVolume {
			parent = filepath.Dir(filepath.Clean(v))
		}
		d, err := os.MkdirTemp(parent, "sluice-bench-")
		if err != nil {
			return fmt.Errorf("making the work directory: %w", err)
		}
		if r.work, err = filepath.Abs(d); err != nil {
			return err
		}
		r.tmpWork = true
		r.cleanups = append(r.cleanups, func() error { return os.RemoveAll(r.work) })
	default:
		if err := os.MkdirAll(v, 0o755); err != nil {
			return fmt.Errorf("--volume %s: %w", v, err)
		}
		var err error
		if r.work, err = filepath.Abs(v); err != nil {
			return err
		}
		r.keep = true
	}
	r.rep.Env.WorkDir, r.rep.Env.TempWorkDir = r.work, r.tmpWork
	if isVolume {
		abs, _ := filepath.Abs(v)
		r.main = &engineVol{role: "W1-W4 (the --volume given)", dir: abs, file: "/.sluice-bench/data", fileBytes: r.sz.DataBytes, cleanFile: true}
	}
	return nil
}

// setupRunner picks fio or the Go runner for the peers.
func (r *runner) setupRunner() {
	switch path := r.cfg.Fio; {
	case path == "none":
		r.sys = goRunner{}
		r.note("peers run with the built-in Go runner (--fio none)")
	default:
		if path == "" {
			path = "fio"
		}
		full, err := exec.LookPath(path)
		v := ""
		if err == nil {
			v = fio.Version(full)
		}
		if v == "" {
			r.sys = goRunner{}
			if len(r.cfg.Targets) > 0 || r.cfg.KernelPeers || !r.cfg.NoRaw {
				r.note("fio (%s) not found or not working: peers run with the built-in Go runner (psync goroutines)", path)
			}
			return
		}
		r.sys = fioRunner{path: full}
		r.rep.Env.Fio = v
	}
}

// volSize is the data image size for a file of n bytes: the file, a
// quarter more, and 16 MiB, in whole MiB (a multiple of every block size
// and I/O unit used).
func volSize(n int64) int64 {
	s := n + n/4 + 16<<20
	return (s + (1<<20 - 1)) &^ (1<<20 - 1)
}

// setupVolumes makes (or reuses) the engine volumes and their files.
func (r *runner) setupVolumes(ctx context.Context) error {
	need := int64(0)
	if r.needData() && r.main == nil {
		need += volSize(r.sz.DataBytes)
	}
	if r.needW5() {
		need += 2 * volSize(r.sz.W5Bytes)
	}
	if r.needAZ() {
		need += volSize(r.azBytes())
	}
	if !r.cfg.NoRaw {
		if r.needData() {
			need += r.sz.DataBytes
		}
		if r.needW5() {
			need += r.sz.W5Bytes
		}
		need += r.azBytes()
	}
	if r.cfg.KernelPeers {
		need += 2 * r.kernelImageBytes()
	}
	if free, err := freeBytes(r.work); err == nil && free < need+need/10 {
		return fmt.Errorf("the work directory %s has %d MiB free; this run needs about %d MiB (use --quick, --only, or --volume on a larger disk)", r.work, free>>20, (need+need/10)>>20)
	}
	var vols []*engineVol
	if r.needData() {
		if r.main == nil {
			r.main = &engineVol{role: "W1-W4", dir: filepath.Join(r.work, "vol"), file: "/data", fileBytes: r.sz.DataBytes,
				blockSize: 4096, ioUnit: 512, sizeBytes: volSize(r.sz.DataBytes)}
			if err := ensureVolume(r.main.dir, r.main.sizeBytes, 4096, 512, r.keep); err != nil {
				return fmt.Errorf("making the W1-W4 volume: %w", err)
			}
		}
		vols = append(vols, r.main)
	}
	if r.needW5() {
		r.u4k = &engineVol{role: "W5, 4 KiB I/O unit", dir: filepath.Join(r.work, "vol-u4k"), file: "/w5", fileBytes: r.sz.W5Bytes,
			blockSize: 4096, ioUnit: 4096, sizeBytes: volSize(r.sz.W5Bytes)}
		r.u64k = &engineVol{role: "W5, 64 KiB I/O unit", dir: filepath.Join(r.work, "vol-u64k"), file: "/w5", fileBytes: r.sz.W5Bytes,
			blockSize: 65536, ioUnit: 65536, sizeBytes: volSize(r.sz.W5Bytes)}
		for _, v := range []*engineVol{r.u4k, r.u64k} {
			if err := ensureVolume(v.dir, v.sizeBytes, v.blockSize, v.ioUnit, r.keep); err != nil {
				return fmt.Errorf("making the %s volume: %w", v.role, err)
			}
			vols = append(vols, v)
		}
	}
	if r.needAZ() {
		// A1's and Z1's files are made afresh by each cell: nothing to
		// prepare. 4 KiB blocks and a 512 B I/O unit, as W1-W4's volume,
		// so that Z1's 512 B direct writes are sub-block writes.
		r.az = &engineVol{role: "A1, Z1", dir: filepath.Join(r.work, "vol-az"), fileBytes: r.azBytes(),
			blockSize: 4096, ioUnit: 512, sizeBytes: volSize(r.azBytes())}
		if err := ensureVolume(r.az.dir, r.az.sizeBytes, 4096, 512, r.keep); err != nil {
			return fmt.Errorf("making the A1/Z1 volume: %w", err)
		}
	}
	for _, v := range append(vols, r.az) {
		if v == nil {
			continue
		}
		if v == r.az {
			if err := r.noteVolume(v, time.Now(), "/a1, /z1 (made afresh by each cell)"); err != nil {
				return err
			}
			continue
		}
		t0 := time.Now()
		if err := v.prepare(); err != nil {
			return fmt.Errorf("preparing %s in %s: %w", v.file, v.dir, err)
		}
		if v.cleanFile {
			r.cleanups = append(r.cleanups, v.removeFile)
		}
		if err := r.noteVolume(v, t0, v.file); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// noteVolume reads v's geometry back from the volume and records it in
// the environment; file names the benchmark files in it.
func (r *runner) noteVolume(v *engineVol, t0 time.Time, file string) error {
	e, err := v.open(polConcurrent.pol)
	if err != nil {
		return err
	}
	v.blockSize, v.ioUnit = e.fs.BlockSize(), e.fs.IOUnit()
	v.sizeBytes = int64(e.vol.Header.DeviceBytes)
	info := v.info()
	info.File, info.Device = file, e.device
	if r.rep.Env.Options["device"] == "" {
		r.rep.Env.Options["device"] = e.device
	}
	if err := e.close(); err != nil {
		return err
	}
	r.rep.Env.Volumes = append(r.rep.Env.Volumes, info)
	r.p.note("volume %s: %d B blocks, %d B I/O unit, %s of %d MiB ready in %v", v.dir, v.blockSize, v.ioUnit, file, v.fileBytes>>20, time.Since(t0).Round(10*time.Millisecond))
	return nil
}

func (r *runner) kernelImageBytes() int64 {
	return r.sz.DataBytes + r.sz.W5Bytes + r.azBytes() + 512<<20
}

// setupPeers makes the raw image, the kernel peers and the files in each
// --target directory.
func (r *runner) setupPeers(ctx context.Context) error {
	env := &r.rep.Env
	if !r.cfg.NoRaw {
		p := &peer{label: r.sys.name() + ":raw", dir: r.work, keep: r.keep, run: r.sys}
		p.info.Setup = "plain files on the work directory's file system, written once with O_DIRECT and fsynced"
		r.peers = append(r.peers, p)
	}
	if r.cfg.KernelPeers {
		for _, fst := range []string{"xfs", "ext4"} {
			r.p.note("making %s on a loop device", fst)
			k, err := makeKernelPeer(ctx, fst, filepath.Join(r.work, "kernel-"+fst+".img"), filepath.Join(r.work, "mnt-"+fst), r.kernelImageBytes())
			if err != nil {
				return fmt.Errorf("kernel peer %s: %w", fst, err)
			}
			r.cleanups = append(r.cleanups, k.remove)
			p := &peer{label: "kernel:" + fst, dir: k.mnt, run: r.sys, devExclusive: true}
			p.info.Setup = strings.Join(k.setup, "; ")
			r.peers = append(r.peers, p)
		}
	}
	for _, t := range r.cfg.Targets {
		abs, err := filepath.Abs(t)
		if err != nil {
			return err
		}
		r.peers = append(r.peers, &peer{label: filepath.Clean(t), dir: abs, run: r.sys})
	}
	for _, p := range r.peers {
		if mm, ok := blockDevOf(p.dir); ok {
			p.dev = mm
		}
		d := describeDevice(p.dir)
		p.info.Label, p.info.Dir, p.info.FSType, p.info.Runner = p.label, p.dir, d.MountFSType, r.sys.name()
		if d.Name != "" {
			p.info.Device = d.Name
			if d.Model != "" {
				p.info.Device += " (" + d.Model + ")"
			}
		}
		prefix := filepath.Join(p.dir, "sluice-bench-")
		if strings.HasSuffix(p.label, ":raw") {
			prefix = filepath.Join(p.dir, "raw-")
		}
		var files []string
		if r.needData() {
			p.data = prefix + "data.img"
			files = append(files, p.data)
		}
		if r.needW5() {
			p.w5 = prefix + "w5.img"
			files = append(files, p.w5)
		}
		// A1's and Z1's files are made by each cell and removed after
		// it; the clean-up catches a cell that was cut short.
		var fresh []string
		if r.cfg.wants("A1") {
			p.a1 = prefix + "a1.img"
			fresh = append(fresh, p.a1)
		}
		if r.cfg.wants("Z1") {
			p.z1 = prefix + "z1.img"
			fresh = append(fresh, p.z1)
		}
		r.cleanups = append(r.cleanups, func() error {
			var errs []error
			for _, f := range fresh {
				if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		})
		if !p.keep {
			r.cleanups = append(r.cleanups, func() error {
				var errs []error
				for _, f := range files {
					if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
						errs = append(errs, err)
					}
				}
				return errors.Join(errs...)
			})
		}
		for _, f := range files {
			size := r.sz.DataBytes
			if f == p.w5 {
				size = r.sz.W5Bytes
			}
			t0 := time.Now()
			if err := prepareFile(ctx, f, size, p.keep); err != nil {
				return fmt.Errorf("peer %s: preparing %s: %w", p.label, f, err)
			}
			r.p.note("peer %s: %s (%d MiB) ready in %v", p.label, f, size>>20, time.Since(t0).Round(10*time.Millisecond))
		}
		env.Peers = append(env.Peers, p.info)
	}
	if len(r.peers) > 0 {
		if r.root {
			env.ColdMethod = "before each cold peer cell (W4, W5): fsync + fadvise(DONTNEED) of the file, sync, echo 3 > /proc/sys/vm/drop_caches"
		} else {
			env.ColdMethod = "before each cold peer cell (W4, W5): fsync + fadvise(DONTNEED) of the file only (not root: drop_caches unavailable, so other caches stay warm)"
			r.note("not root: peers' cold cells drop only the file's own pages (fadvise DONTNEED), not the whole page cache")
		}
	}
	env.ColdMethod = strings.TrimSpace("engine: a fresh sluice.Open per cold cell (empty page cache; the data device is O_DIRECT, so the host page cache is not involved). " + env.ColdMethod)
	return nil
}

// cellEst estimates one cell: the measured time, the warm-up, and a
// fixed cost (opening an engine, starting fio, dropping caches).
func (r *runner) cellEst(warm bool, fixed time.Duration) time.Duration {
	d := r.sz.Cell + fixed
	if warm {
		d += r.sz.Warmup
	}
	return d
}

// peerFixed is the fixed cost of one peer cell.
func (r *runner) peerFixed(cold bool) time.Duration {
	d := 20 * time.Millisecond
	if _, ok := r.sys.(fioRunner); ok {
		d = 400 * time.Millisecond
	}
	if cold {
		d += 150 * time.Millisecond
	}
	return d
}

// plan tells the progress reporter how many cells of what length to
// expect.
func (r *runner) plan() {
	sz, np := r.sz, len(r.peers)
	for _, id := range AllExperiments {
		if !r.cfg.wants(id) {
			continue
		}
		switch id {
		case "W1":
			r.p.plan(2*len(w1BS)*len(w1Threads)*sz.Reps, r.cellEst(true, 20*time.Millisecond))
			r.p.plan(len(w1BS)*len(w1Threads)*sz.PeerReps*np, r.cellEst(true, r.peerFixed(false)))
		case "W2":
			r.p.plan(len(w2Policies)*len(w2BS)*sz.Reps, r.cellEst(true, 20*time.Millisecond))
			r.p.plan(len(w2BS)*sz.PeerReps*np, r.cellEst(true, r.peerFixed(false)))
		case "W3":
			r.p.plan(2*len(w3Layouts)*sz.Reps, r.cellEst(true, 60*time.Millisecond))
			r.p.plan(sz.PeerReps*np, r.cellEst(true, r.peerFixed(false)))
		case "W4":
			r.p.plan(2*len(w4Depths)*sz.Reps, r.cellEst(false, 40*time.Millisecond))
			r.p.plan(len(w4Depths)*sz.PeerReps*np, r.cellEst(false, r.peerFixed(true)))
		case "W5":
			r.p.plan(2*2*len(w5BS)*2*sz.W5Reps, r.cellEst(false, sz.Cell/4+60*time.Millisecond))
			r.p.plan(len(w5BS)*2*sz.PeerReps*np, r.cellEst(false, sz.Cell/4+r.peerFixed(true)))
		case "A1":
			r.p.plan(len(a1Policies)*len(a1Modes)*len(a1Appenders)*sz.Reps, r.cellEst(true, a1EngineFixed))
			r.p.plan(len(a1Modes)*len(a1Appenders)*sz.PeerReps*np, r.cellEst(true, a1PeerFixed))
		case "Z1":
			r.p.plan(len(z1Policies)*sz.Reps, r.cellEst(true, z1EngineFixed))
			r.p.plan(sz.PeerReps*np, r.cellEst(true, r.peerFixed(false)))
		}
	}
}

// goroutines returns the process's goroutine count.
func goroutines() int { return runtime.NumGoroutine() }
