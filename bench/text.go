package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"
)

// table is a text table: a left-aligned first column, the others right
// aligned.
type table struct {
	title  string
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	width := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], utf8.RuneCountInString(c))
			}
		}
	}
	if t.title != "" {
		fmt.Fprintln(w, t.title)
	}
	line := func(r []string) {
		var b strings.Builder
		for i := range width {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.header)
	for _, r := range t.rows {
		line(r)
	}
	fmt.Fprintln(w)
}

// Number formats.

func fmtIOPS(v float64, ok bool) string {
	if !ok || math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtMiB(v float64, ok bool) string {
	if !ok || math.IsNaN(v) {
		return "-"
	}
	if v == 0 {
		return "0"
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	if v >= 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtUS(ns float64, ok bool) string {
	if !ok || math.IsNaN(ns) {
		return "-"
	}
	return fmt.Sprintf("%.1f", ns/1000)
}

func fmtRatio(v float64, ok bool) string {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if v >= 10 {
		return fmt.Sprintf("%.0fx", v)
	}
	return fmt.Sprintf("%.2fx", v)
}

func fmtCount(v float64, ok bool) string {
	if !ok || math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

// cellText renders a row's metric, "err" for a failed row, "-" for none.
func cellText(r *Row, metric string, f func(float64, bool) string) string {
	if r != nil && r.Error != "" {
		return "err"
	}
	v, ok := r.Metric(metric)
	return f(v, ok)
}

// ratio returns a's metric over b's.
func ratio(a, b *Row, metric string) (float64, bool) {
	x, ok1 := a.Metric(metric)
	y, ok2 := b.Metric(metric)
	if !ok1 || !ok2 || y == 0 {
		return 0, false
	}
	return x / y, true
}

func bsName(bs int) string {
	switch {
	case bs >= 1<<20 && bs%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", bs>>20)
	case bs >= 1024 && bs%1024 == 0:
		return fmt.Sprintf("%d KiB", bs>>10)
	}
	return fmt.Sprintf("%d B", bs)
}

// wrap breaks s into lines of at most n columns, each prefixed.
func wrap(s string, n int, prefix string) string {
	var out []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > n {
			out = append(out, prefix+line)
			line = w
			continue
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		out = append(out, prefix+line)
	}
	return strings.Join(out, "\n")
}

// peerSeries returns the experiment's peer series.
func (e *Experiment) peerSeries() []series {
	var out []series
	for _, s := range e.series() {
		if s.Target != TargetEngine {
			out = append(out, s)
		}
	}
	return out
}

// WriteText writes the report's tables: for each experiment its
// description, the seed's numbers, the tables, and at the end the
// headline ratios against the seeds.
func (r *Report) WriteText(w io.Writer) {
	env := &r.Env
	fmt.Fprintf(w, "sluice bench (%s sizing): %s, %d CPUs (%s), %s; device %s %s (%s on %s)\n",
		env.Sizing, env.Kernel, env.CPUs, env.CPUModel, env.SluiceVersion, env.Device.Name, env.Device.Model, env.Device.MountFSType, env.Device.MountPoint)
	if env.Fio != "" {
		fmt.Fprintf(w, "peers run with %s\n", env.Fio)
	}
	fmt.Fprintf(w, "machine load: loadavg %s before the run, %s at its end; all CPUs %.0f%% busy over the run, %.0f%% by other processes\n",
		env.LoadAvgStart, env.LoadAvgEnd, env.MachineBusyPct, env.OthersBusyPct)
	if n := r.noiseWarning(); n != "" {
		fmt.Fprintf(w, "%s\n", wrap("WARNING: "+n, 110, ""))
	}
	fmt.Fprintf(w, "%s\n", wrap("cold: "+env.ColdMethod, 110, ""))
	for _, n := range env.Notes {
		fmt.Fprintf(w, "%s\n", wrap("note: "+n, 110, ""))
	}
	fmt.Fprintln(w)
	for i := range r.Experiments {
		e := &r.Experiments[i]
		fmt.Fprintf(w, "=== %s: %s ===\n", e.heading(), e.Title)
		fmt.Fprintln(w, wrap(e.Workload, 110, ""))
		for _, n := range e.Notes {
			fmt.Fprintln(w, wrap(n, 110, ""))
		}
		if e.SeedNumbers != "" {
			fmt.Fprintln(w, wrap(e.SeedNumbers, 110, "| "))
		}
		if e.Goal != "" {
			fmt.Fprintln(w, wrap("Goal: "+e.Goal, 110, "| "))
		}
		if s := e.spreadSummary(); s != "" {
			fmt.Fprintln(w, wrap(s, 110, ""))
		}
		fmt.Fprintln(w)
		for _, t := range e.tables() {
			t.write(w)
		}
		for _, row := range e.Rows {
			if row.Error != "" {
				fmt.Fprintf(w, "error: %s %s %v: %s\n", row.Target, row.Policy, keyParams(row.Params), row.Error)
			}
		}
	}
	r.textHeadlines(w)
	fmt.Fprintf(w, "wall time %.0f s\n", env.WallSeconds)
}

// heading names the experiment and its seed: "W1 (seed 001)", "A1
// (beyond the seeds)".
func (e *Experiment) heading() string {
	if e.Seed == "" {
		return e.ID + " (beyond the seeds)"
	}
	return fmt.Sprintf("%s (seed %s)", e.ID, e.Seed)
}

// keyParams are the identifying params of a row, for error lines.
func keyParams(p map[string]any) string {
	var parts []string
	for _, k := range []string{"mode", "appenders", "bs", "threads", "depth", "rings", "io_unit", "sync"} {
		if v, ok := p[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}

func (e *Experiment) tablesW1() []*table {
	var out []*table
	head := []string{"bs \\ threads"}
	for _, n := range w1Threads {
		head = append(head, fmt.Sprint(n))
	}
	matrix := func(title string, cell func(bs, n int) string) {
		t := &table{title: title, header: head}
		for _, bs := range w1BS {
			r := []string{bsName(bs)}
			for _, n := range w1Threads {
				r = append(r, cell(bs, n))
			}
			t.add(r...)
		}
		out = append(out, t)
	}
	find := func(target, pol string, bs, n int) *Row {
		return e.Find(target, pol, map[string]any{"bs": bs, "threads": n})
	}
	for _, pol := range []string{PolicyClassic, PolicyConcurrent} {
		matrix("IOPS, engine "+pol+":", func(bs, n int) string {
			return cellText(find(TargetEngine, pol, bs, n), "iops", fmtIOPS)
		})
	}
	matrix("concurrent / classic:", func(bs, n int) string {
		return fmtRatio(ratio(find(TargetEngine, PolicyConcurrent, bs, n), find(TargetEngine, PolicyClassic, bs, n), "iops"))
	})
	matrix("seed 001 after / before (for comparison):", func(bs, n int) string {
		return fmtRatio(seed001Ratio(bs, n))
	})
	for _, s := range e.peerSeries() {
		matrix("IOPS, "+s.Target+":", func(bs, n int) string {
			return cellText(find(s.Target, s.Policy, bs, n), "iops", fmtIOPS)
		})
		matrix("engine concurrent / "+s.Target+":", func(bs, n int) string {
			return fmtRatio(ratio(find(TargetEngine, PolicyConcurrent, bs, n), find(s.Target, s.Policy, bs, n), "iops"))
		})
	}
	matrix("CPU us per I/O, engine classic / concurrent:", func(bs, n int) string {
		return cellText(find(TargetEngine, PolicyClassic, bs, n), "cpu_ns_per_io", fmtUS) + "/" +
			cellText(find(TargetEngine, PolicyConcurrent, bs, n), "cpu_ns_per_io", fmtUS)
	})
	return out
}

func (e *Experiment) tablesW2() []*table {
	ss := e.series()
	head := []string{"bs", "metric"}
	for _, s := range ss {
		head = append(head, s.label())
	}
	noOUW := without("OptimisticUnalignedWrites").label
	head = append(head, "conc/classic", "conc/(w/o 000)", "seed after/before")
	t := &table{header: head}
	for _, bs := range w2BS {
		for _, m := range []struct{ key, name string }{
			{"read_iops", "read IOPS"}, {"write_iops", "write IOPS"}, {"iops", "total IOPS"},
			{"read_mib_s", "read MiB/s"}, {"write_mib_s", "write MiB/s"},
			{"cpu_ns_per_io", "CPU us/IO"}, {"excl_lock_frac", "exclusive lock %"},
		} {
			r := []string{bsName(bs), m.name}
			for _, s := range ss {
				row := e.Find(s.Target, s.Policy, map[string]any{"bs": bs})
				switch {
				case m.key == "cpu_ns_per_io":
					r = append(r, cellText(row, m.key, fmtUS))
				case m.key == "excl_lock_frac":
					r = append(r, cellText(row, m.key, func(v float64, ok bool) string {
						if !ok {
							return "-"
						}
						return fmt.Sprintf("%.0f%%", 100*v)
					}))
				case strings.HasSuffix(m.key, "mib_s"):
					r = append(r, cellText(row, m.key, fmtMiB))
				default:
					r = append(r, cellText(row, m.key, fmtIOPS))
				}
			}
			if strings.HasSuffix(m.key, "iops") || strings.HasSuffix(m.key, "mib_s") {
				conc := e.Find(TargetEngine, PolicyConcurrent, map[string]any{"bs": bs})
				r = append(r, fmtRatio(ratio(conc, e.Find(TargetEngine, PolicyClassic, map[string]any{"bs": bs}), m.key)),
					fmtRatio(ratio(conc, e.Find(TargetEngine, noOUW, map[string]any{"bs": bs}), m.key)))
				if m.key == "iops" {
					if bs == 512 {
						r = append(r, fmtRatio(float64(seed000AfterIOPS512)/seed000BeforeIOPS512, true))
					} else {
						r = append(r, "1.00x (control)")
					}
				}
			}
			t.add(r...)
		}
	}
	return []*table{t}
}

func (e *Experiment) tablesW3() []*table {
	peers := e.peerSeries()
	head := []string{"rings", "hashed IOPS", "parallel IOPS", "parallel/hashed", "seed"}
	for _, s := range peers {
		head = append(head, s.Target+" IOPS")
	}
	head = append(head, "CPU us/IO h/p", "peak blocked workers per ring h/p", "hashed waits/IO")
	t := &table{title: "IOPS (h/p = hashed, i.e. classic / parallel, i.e. concurrent; peers run 8 fio jobs, each with its own io-wq):", header: head}
	for _, layout := range w3Layouts {
		k := map[string]any{"rings": layout}
		cl, co := e.Find(TargetEngine, PolicyClassic, k), e.Find(TargetEngine, PolicyConcurrent, k)
		r := []string{layout, cellText(cl, "iops", fmtIOPS), cellText(co, "iops", fmtIOPS), fmtRatio(ratio(co, cl, "iops")),
			fmtRatio(float64(seed002AfterIOPS)/seed002BeforeIOPS, true)}
		for _, s := range peers {
			r = append(r, cellText(e.Find(s.Target, s.Policy, k), "iops", fmtIOPS))
		}
		r = append(r, cellText(cl, "cpu_ns_per_io", fmtUS)+"/"+cellText(co, "cpu_ns_per_io", fmtUS),
			cellText(cl, "blocked_workers_max", fmtCount)+"/"+cellText(co, "blocked_workers_max", fmtCount),
			cellText(cl, "hashed_waits_per_io", func(v float64, ok bool) string {
				if !ok {
					return "-"
				}
				return fmt.Sprintf("%.2f", v)
			}))
		t.add(r...)
	}
	return []*table{t}
}

func (e *Experiment) tablesW4() []*table {
	peers := e.peerSeries()
	head := []string{"depth", "classic IOPS", "concurrent IOPS", "conc/classic", "seed patched/mainline"}
	for _, s := range peers {
		head = append(head, s.Target+" IOPS")
	}
	head = append(head, "CPU us/IO classic", "concurrent", "ratio")
	for _, s := range peers {
		head = append(head, s.Target+" CPU us/IO")
	}
	t := &table{title: "Throughput and CPU:", header: head}
	t2 := &table{title: "Goroutines and workers (engine; goroutines_base is the process's count before the cell):",
		header: []string{"depth", "peak goroutines classic", "concurrent", "base", "peak blocked workers classic", "concurrent", "retries armed (concurrent)", "cache hits classic/concurrent"}}
	for _, d := range w4Depths {
		k := map[string]any{"depth": d}
		cl, co := e.Find(TargetEngine, PolicyClassic, k), e.Find(TargetEngine, PolicyConcurrent, k)
		seed := "-"
		for i, sd := range seed003Depths {
			if sd == d {
				seed = fmtRatio(seed003Patched[i]/seed003Mainline[i], true)
			}
		}
		if d == 32 {
			seed = fmtRatio(seed003QD32Ratio, true) + " (4 GiB run)"
		}
		r := []string{fmt.Sprint(d), cellText(cl, "iops", fmtIOPS), cellText(co, "iops", fmtIOPS), fmtRatio(ratio(co, cl, "iops")), seed}
		for _, s := range peers {
			r = append(r, cellText(e.Find(s.Target, s.Policy, k), "iops", fmtIOPS))
		}
		r = append(r, cellText(cl, "cpu_ns_per_io", fmtUS), cellText(co, "cpu_ns_per_io", fmtUS), fmtRatio(ratio(co, cl, "cpu_ns_per_io")))
		for _, s := range peers {
			r = append(r, cellText(e.Find(s.Target, s.Policy, k), "cpu_ns_per_io", fmtUS))
		}
		t.add(r...)
		pct := func(row *Row) string {
			return cellText(row, "cache_hit_pct", func(v float64, ok bool) string {
				if !ok {
					return "-"
				}
				return fmt.Sprintf("%.1f%%", v)
			})
		}
		t2.add(fmt.Sprint(d), cellText(cl, "goroutines_max", fmtCount), cellText(co, "goroutines_max", fmtCount), cellText(co, "goroutines_base", fmtCount),
			cellText(cl, "blocked_workers_max", fmtCount), cellText(co, "blocked_workers_max", fmtCount),
			cellText(co, "retries_armed", fmtCount), pct(cl)+"/"+pct(co))
	}
	return []*table{t, t2}
}

func (e *Experiment) tablesW5() []*table {
	peers := e.peerSeries()
	units := []int{4096, 65536}
	head := []string{"mode", "bs"}
	for _, u := range units {
		head = append(head, fmt.Sprintf("%s unit classic", bsName(u)), "concurrent", "ratio")
	}
	head = append(head, "seed ratio")
	for _, s := range peers {
		head = append(head, s.Target)
	}
	t := &table{title: "MiB/s (fsync at the end included):", header: head}
	head2 := []string{"mode", "bs"}
	for _, u := range units {
		head2 = append(head2, fmt.Sprintf("%s unit classic", bsName(u)), "concurrent")
	}
	for _, s := range peers {
		head2 = append(head2, s.Target)
	}
	head2 = append(head2, "MiB written cl/co, 4 KiB unit", "64 KiB unit")
	t2 := &table{title: "Device reads per MiB written (engine: pages read before writes + I/O units read back at writeback; " +
		"peers: their block device's reads, only on a device the run made):", header: head2}
	for _, sync := range w5Syncs {
		for _, bs := range w5BS {
			r := []string{syncName(sync), bsName(bs)}
			r2 := []string{syncName(sync), bsName(bs)}
			for _, u := range units {
				k := map[string]any{"io_unit": u, "bs": bs, "sync": sync}
				cl, co := e.Find(TargetEngine, PolicyClassic, k), e.Find(TargetEngine, PolicyConcurrent, k)
				r = append(r, cellText(cl, "mib_s", fmtMiB), cellText(co, "mib_s", fmtMiB), fmtRatio(ratio(co, cl, "mib_s")))
				r2 = append(r2, cellText(cl, "device_reads_per_mib", fmtMiB), cellText(co, "device_reads_per_mib", fmtMiB))
			}
			r = append(r, fmtRatio(seed004Ratio(bs, sync)))
			pk := map[string]any{"bs": bs, "sync": sync}
			for _, s := range peers {
				r = append(r, cellText(e.Find(s.Target, s.Policy, pk), "mib_s", fmtMiB))
				r2 = append(r2, peerDeviceReads(e.Find(s.Target, s.Policy, pk)))
			}
			mib := func(row *Row) string {
				v, ok := row.Metric("bytes_written")
				return fmtMiB(v/(1<<20), ok)
			}
			for _, u := range units {
				k := map[string]any{"io_unit": u, "bs": bs, "sync": sync}
				r2 = append(r2, mib(e.Find(TargetEngine, PolicyClassic, k))+"/"+mib(e.Find(TargetEngine, PolicyConcurrent, k)))
			}
			t.add(r...)
			t2.add(r2...)
		}
	}
	return []*table{t, t2}
}

// fmtPct renders a fraction as a percentage.
func fmtPct(v float64, ok bool) string {
	if !ok || math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

func (e *Experiment) tablesA1() []*table {
	peers := e.peerSeries()
	var out []*table
	for _, mode := range a1Modes {
		head := []string{"appenders", "classic", "seeds", "concurrent", fmt.Sprintf("concurrent/seeds (goal >= %.0fx at 8+)", a1Goal), "seeds/classic"}
		for _, s := range peers {
			head = append(head, s.Target)
		}
		if len(peers) > 0 {
			head = append(head, "concurrent/"+peers[0].Target)
		}
		head = append(head, "CPU us/IO cl/se/co", "exclusive lock % se/co")
		if mode == "direct" {
			head = append(head, "max in flight se/co")
		}
		t := &table{title: fmt.Sprintf("Appends/s, %s|O_APPEND, 4 KiB records, one file, each appender its own open file:", modeName(mode)), header: head}
		for _, n := range a1Appenders {
			k := map[string]any{"mode": mode, "appenders": n}
			cl, se, co := e.Find(TargetEngine, PolicyClassic, k), e.Find(TargetEngine, PolicySeeds, k), e.Find(TargetEngine, PolicyConcurrent, k)
			r := []string{fmt.Sprint(n), cellText(cl, "iops", fmtIOPS), cellText(se, "iops", fmtIOPS), cellText(co, "iops", fmtIOPS),
				fmtRatio(ratio(co, se, "iops")), fmtRatio(ratio(se, cl, "iops"))}
			for _, s := range peers {
				r = append(r, cellText(e.Find(s.Target, s.Policy, k), "iops", fmtIOPS))
			}
			if len(peers) > 0 {
				r = append(r, fmtRatio(ratio(co, e.Find(peers[0].Target, peers[0].Policy, k), "iops")))
			}
			r = append(r, cellText(cl, "cpu_ns_per_io", fmtUS)+"/"+cellText(se, "cpu_ns_per_io", fmtUS)+"/"+cellText(co, "cpu_ns_per_io", fmtUS),
				cellText(se, "excl_lock_frac", fmtPct)+"/"+cellText(co, "excl_lock_frac", fmtPct))
			if mode == "direct" {
				r = append(r, cellText(se, "max_in_flight", fmtCount)+"/"+cellText(co, "max_in_flight", fmtCount))
			}
			t.add(r...)
		}
		out = append(out, t)
	}
	return out
}

func (e *Experiment) tablesZ1() []*table {
	ss := e.series()
	head := []string{"metric"}
	for _, s := range ss {
		head = append(head, s.label())
	}
	head = append(head, fmt.Sprintf("concurrent/seeds (goal >= %.0fx)", z1Goal), "concurrent/classic", "seeds/classic")
	t := &table{title: fmt.Sprintf("%d B O_DIRECT random writes at QD%d into unwritten blocks:", z1BS, z1Depth), header: head}
	k := map[string]any{"bs": z1BS}
	cl, se, co := e.Find(TargetEngine, PolicyClassic, k), e.Find(TargetEngine, PolicySeeds, k), e.Find(TargetEngine, PolicyConcurrent, k)
	for _, m := range []struct {
		key, name string
		f         func(float64, bool) string
	}{
		{"iops", "IOPS", fmtIOPS}, {"mib_s", "MiB/s", fmtMiB}, {"cpu_ns_per_io", "CPU us/IO", fmtUS},
		{"excl_lock_frac", "exclusive lock %", fmtPct}, {"drains_per_io", "drains per write", func(v float64, ok bool) string {
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.2f", v)
		}},
		{"max_in_flight", "max in flight", fmtCount}, {"converted_frac", "region written %", fmtPct},
	} {
		r := []string{m.name}
		for _, s := range ss {
			r = append(r, cellText(e.Find(s.Target, s.Policy, k), m.key, m.f))
		}
		if m.key == "iops" || m.key == "mib_s" {
			r = append(r, fmtRatio(ratio(co, se, m.key)), fmtRatio(ratio(co, cl, m.key)), fmtRatio(ratio(se, cl, m.key)))
		}
		t.add(r...)
	}
	return []*table{t}
}

// tables returns the experiment's tables.
func (e *Experiment) tables() []*table {
	switch e.ID {
	case "W1":
		return e.tablesW1()
	case "W2":
		return e.tablesW2()
	case "W3":
		return e.tablesW3()
	case "W4":
		return e.tablesW4()
	case "W5":
		return e.tablesW5()
	case "A1":
		return e.tablesA1()
	case "Z1":
		return e.tablesZ1()
	}
	return nil
}

// headline is one comparison of the summary: the engine's ratio and the
// seed's.
type headline struct {
	exp, what  string
	ours, seed float64
	oursOK     bool
	// goal says seed is the goal (A1, Z1), not a seed's ratio.
	goal   bool
	vsPeer string // engine concurrent / the first peer
}

// headlines picks, per experiment, the cells the seeds' claims are about.
func (r *Report) headlines() []headline {
	var out []headline
	firstPeer := func(e *Experiment, k map[string]any, metric string) string {
		ps := e.peerSeries()
		if len(ps) == 0 {
			return ""
		}
		v, ok := ratio(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(ps[0].Target, ps[0].Policy, k), metric)
		if !ok {
			return ""
		}
		return fmtRatio(v, true) + " of " + ps[0].Target
	}
	add := func(e *Experiment, what string, num, den *Row, metric string, seed float64, k map[string]any) {
		v, ok := ratio(num, den, metric)
		h := headline{exp: e.ID, what: what, ours: v, oursOK: ok, seed: seed}
		if k != nil {
			h.vsPeer = firstPeer(e, k, metric)
		}
		out = append(out, h)
	}
	if e := r.Experiment("W1"); e != nil {
		for _, bs := range w1BS {
			for _, n := range []int{1, 32} {
				k := map[string]any{"bs": bs, "threads": n}
				s, _ := seed001Ratio(bs, n)
				add(e, fmt.Sprintf("%s, %d thread(s): concurrent/classic IOPS", bsName(bs), n),
					e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "iops", s, k)
			}
		}
	}
	if e := r.Experiment("W2"); e != nil {
		noOUW := without("OptimisticUnalignedWrites").label
		for _, bs := range w2BS {
			k := map[string]any{"bs": bs}
			s := 1.0
			if bs == 512 {
				s = float64(seed000AfterIOPS512) / seed000BeforeIOPS512
			}
			add(e, fmt.Sprintf("%s: concurrent/(concurrent w/o 000) IOPS", bsName(bs)),
				e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, noOUW, k), "iops", s, k)
			add(e, fmt.Sprintf("%s: concurrent/classic IOPS", bsName(bs)),
				e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "iops", s, nil)
		}
	}
	if e := r.Experiment("W3"); e != nil {
		for _, l := range w3Layouts {
			k := map[string]any{"rings": l}
			var pk map[string]any
			if l == "per-submitter" {
				pk = k
			}
			add(e, "ring "+l+": parallel/hashed IOPS", e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "iops",
				float64(seed002AfterIOPS)/seed002BeforeIOPS, pk)
		}
	}
	if e := r.Experiment("W4"); e != nil {
		for _, d := range []int{8, 32} {
			k := map[string]any{"depth": d}
			s := seed003QD32Ratio
			if d == 8 {
				s = seed003Patched[3] / seed003Mainline[3]
			}
			add(e, fmt.Sprintf("QD%d: concurrent/classic IOPS", d), e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "iops", s, k)
		}
		k := map[string]any{"depth": 32}
		add(e, "QD32: concurrent/classic CPU per read", e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "cpu_ns_per_io",
			(0.52*9.28)/(0.82*12.05), nil)
	}
	if e := r.Experiment("W5"); e != nil {
		for _, u := range []int{4096, 65536} {
			for _, sync := range w5Syncs {
				for _, bs := range w5BS {
					k := map[string]any{"io_unit": u, "bs": bs, "sync": sync}
					s, _ := seed004Ratio(bs, sync)
					var pk map[string]any
					if u == 4096 {
						pk = map[string]any{"bs": bs, "sync": sync}
					}
					h := len(out)
					add(e, fmt.Sprintf("%s unit, %s %s: concurrent/classic MiB/s", bsName(u), syncName(sync), bsName(bs)),
						e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "mib_s", s, nil)
					if pk != nil {
						out[h].vsPeer = firstPeerW5(e, k, pk)
					}
				}
			}
		}
	}
	goal := func(e *Experiment, what string, k map[string]any, metric string, g float64) {
		add(e, what, e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicySeeds, k), metric, g, k)
		out[len(out)-1].goal = true
	}
	if e := r.Experiment("A1"); e != nil {
		for _, mode := range a1Modes {
			for _, n := range []int{8, 32} {
				goal(e, fmt.Sprintf("%s appends, %d appenders: concurrent/seeds appends/s", modeName(mode), n),
					map[string]any{"mode": mode, "appenders": n}, "iops", a1Goal)
			}
		}
	}
	if e := r.Experiment("Z1"); e != nil {
		goal(e, fmt.Sprintf("%d B into unwritten blocks, QD%d: concurrent/seeds IOPS", z1BS, z1Depth), map[string]any{"bs": z1BS}, "iops", z1Goal)
	}
	return out
}

// firstPeerW5 compares the engine's concurrent W5 cell k with the first
// peer's cell pk (peers have no I/O unit parameter).
func firstPeerW5(e *Experiment, k, pk map[string]any) string {
	ps := e.peerSeries()
	if len(ps) == 0 {
		return ""
	}
	v, ok := ratio(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(ps[0].Target, ps[0].Policy, pk), "mib_s")
	if !ok {
		return ""
	}
	return fmtRatio(v, true) + " of " + ps[0].Target
}

func (r *Report) textHeadlines(w io.Writer) {
	if t := r.headlineTable(); t != nil {
		t.write(w)
	}
}

// headlineTable is the summary table of headlines, or nil.
func (r *Report) headlineTable() *table {
	hs := r.headlines()
	if len(hs) == 0 {
		return nil
	}
	t := &table{title: "=== Headline ratios: sluice's policy effect against the seed's own before/after (A1, Z1: against the issue's goal) ===",
		header: []string{"exp", "comparison", "sluice", "seed", "sluice/seed", "engine concurrent vs peer"}}
	for _, h := range hs {
		rel := "-"
		if h.oursOK && h.seed > 0 {
			rel = fmtRatio(h.ours/h.seed, true)
		}
		seed := fmtRatio(h.seed, h.seed > 0)
		if h.goal {
			seed += " (goal, at least)"
		}
		t.add(h.exp, h.what, fmtRatio(h.ours, h.oursOK), seed, rel, h.vsPeer)
	}
	return t
}

// peerDeviceReads renders a peer's device reads: only when the device is
// the run's own (a kernel peer's loop device); "shared" otherwise.
func peerDeviceReads(r *Row) string {
	if r != nil && r.Error == "" && fmt.Sprint(r.Params["device_exclusive"]) != "true" {
		return "shared"
	}
	return cellText(r, "device_reads_per_mib", fmtMiB)
}

// noiseWarning says, when the machine was busy with other work during
// the run, what that means for the numbers.
func (r *Report) noiseWarning() string {
	env := &r.Env
	// The load average at the start is the others' alone; later ones
	// count this run's own threads (and fio's, blocked in I/O) too.
	var load float64
	fmt.Sscan(env.LoadAvgStart, &load)
	if env.CPUs == 0 || (load <= float64(env.CPUs) && env.OthersBusyPct < 25) {
		return ""
	}
	return fmt.Sprintf("other work kept the machine busy during this run (load average %.1f on %d CPUs before it started; %.0f%% of all CPU time went to other processes): "+
		"cells competed for CPU with unrelated work, so single numbers are unreliable; see each experiment's run-to-run spread and trust only the ratios whose samples agree.",
		load, env.CPUs, env.OthersBusyPct)
}

// spreadSummary describes the run-to-run spread of the engine's repeated
// cells: the median and the largest (max-min)/median of their main
// metric.
func (e *Experiment) spreadSummary() string {
	var spreads []float64
	n := 0
	for _, r := range e.Rows {
		if r.Target != TargetEngine {
			continue
		}
		for _, m := range []string{"iops", "mib_s"} {
			xs := r.Samples[m]
			if len(xs) < 2 {
				continue
			}
			lo, hi := xs[0], xs[0]
			for _, x := range xs {
				lo, hi = min(lo, x), max(hi, x)
			}
			if med := median(xs); med > 0 {
				spreads = append(spreads, (hi-lo)/med)
				n = len(xs)
			}
			break
		}
	}
	if len(spreads) == 0 {
		return ""
	}
	worst := spreads[0]
	for _, s := range spreads {
		worst = max(worst, s)
	}
	return fmt.Sprintf("Run-to-run spread of the engine cells (%d runs each): (max-min)/median is %.0f%% for the median cell, %.0f%% at worst; every run is in the JSON (samples).",
		n, 100*median(spreads), 100*worst)
}
