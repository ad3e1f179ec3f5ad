package bench

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"regexp"
	"strings"
)

// WriteHTML writes the report as one self-contained HTML page: the
// environment, the headline ratios against the seeds, and per
// experiment its description, the seed's numbers, SVG charts and the
// same tables as the text report. No scripts, fonts or images are
// fetched.
func (r *Report) WriteHTML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	h := &htmlWriter{w: bw}
	h.page(r)
	return bw.Flush()
}

type htmlWriter struct{ w io.Writer }

func (h *htmlWriter) p(format string, args ...any) { fmt.Fprintf(h.w, format, args...) }

// esc escapes text for HTML.
func esc(s string) string { return html.EscapeString(s) }

const css = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;margin:0;background:#f6f7f9}
main{max-width:1280px;margin:0 auto;padding:20px 28px 60px;background:#fff}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:34px 0 6px;padding-top:10px;border-top:2px solid #e3e6ea}
h3{font-size:15px;margin:18px 0 6px}
p{margin:6px 0;max-width:1100px}
.sub{color:#5a6270}
.seed{background:#fff8e6;border-left:4px solid #e0a400;padding:8px 12px;margin:10px 0;max-width:1100px}
.note{color:#4a5261;font-size:13px}
table{border-collapse:collapse;margin:6px 0 14px;font-size:13px}
th,td{padding:3px 9px;border-bottom:1px solid #e6e8eb;text-align:right;white-space:nowrap}
th{background:#f0f2f5;font-weight:600}
td:first-child,th:first-child,td.t,th.t{text-align:left}
.tblgrid{display:flex;flex-wrap:wrap;gap:0 26px;align-items:flex-start}
.tblgrid>div{min-width:0;max-width:100%}
table.kv td{text-align:left;white-space:normal}table.kv td:first-child{color:#5a6270;width:190px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:14px;margin:10px 0}
.chart{border:1px solid #e3e6ea;border-radius:6px;padding:6px;background:#fff}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:13px;margin:4px 0}
.legend span.sw{display:inline-block;width:14px;height:10px;margin-right:5px;border-radius:2px;vertical-align:middle}
.err{color:#b00020}
details{margin:6px 0}summary{cursor:pointer;color:#33507a}
.tables{overflow-x:auto}
`

func (h *htmlWriter) page(r *Report) {
	env := &r.Env
	h.p("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>sluice bench: %s sizing, %s</title>\n<style>%s</style></head><body><main>\n",
		esc(env.Sizing), esc(env.Started), css)
	h.p("<h1>sluice bench: the seed experiments</h1>\n")
	h.p("<p class=\"sub\">Each experiment runs the engine with the seed's optimisation off (<b>classic</b>) and on (<b>concurrent</b>), "+
		"and the same workload on the peers through system calls. Ratios are what to compare with the seeds: the absolute numbers come from a "+
		"%d-CPU machine (%s), not the seeds' hardware.</p>\n", env.CPUs, esc(env.Kernel))
	if w := r.noiseWarning(); w != "" {
		h.p("<div class=\"seed\" style=\"border-color:#b00020;background:#fdecee\"><b>Noisy machine.</b> %s</div>\n", esc(w))
	}
	h.env(r)
	if t := r.headlineTable(); t != nil {
		h.p("<h2 id=\"headlines\">Headline ratios against the seeds' own before/after</h2>\n")
		h.p("<p class=\"note\">sluice = the engine's concurrent/classic (or the named) ratio on this machine; seed = the same ratio in the seed's measurement; "+
			"the last column puts the engine's concurrent number against the first peer (%s).</p>\n", esc(firstPeerLabel(r)))
		h.table(t, false)
	}
	for i := range r.Experiments {
		h.experiment(&r.Experiments[i])
	}
	h.p("</main></body></html>\n")
}

func firstPeerLabel(r *Report) string {
	if len(r.Env.Peers) == 0 {
		return "none"
	}
	return r.Env.Peers[0].Label
}

func (h *htmlWriter) env(r *Report) {
	env := &r.Env
	h.p("<h2 id=\"env\">Environment</h2>\n<table class=\"kv\">\n")
	kv := func(k, v string) { h.p("<tr><td>%s</td><td>%s</td></tr>\n", esc(k), v) }
	kv("command", "<code>"+esc(env.Command)+"</code>")
	kv("started / wall time", fmt.Sprintf("%s, %.0f s", esc(env.Started), env.WallSeconds))
	kv("sizing", fmt.Sprintf("%s: W1-W4 file %d MiB, W5 file %d MiB; cells of %.2f s after %.2f s warm-up; median of %d runs (W5 %d, peers %d)",
		esc(env.Sizing), env.DataBytes>>20, env.W5Bytes>>20, env.CellSeconds, env.WarmupSeconds, env.Reps, env.W5Reps, env.PeerReps))
	kv("kernel", esc(env.Kernel))
	kv("CPUs", fmt.Sprintf("%d x %s; memory %d GiB", env.CPUs, esc(env.CPUModel), env.MemoryBytes>>30))
	kv("machine load", fmt.Sprintf("loadavg %s before the run, %s at its end; all CPUs %.0f%% busy over the run, %.0f%% by other processes",
		esc(env.LoadAvgStart), esc(env.LoadAvgEnd), env.MachineBusyPct, env.OthersBusyPct))
	d := env.Device
	kv("device", fmt.Sprintf("%s %s, %d GiB, rotational %t, logical block %d B, scheduler %s; %s (%s) mounted at %s with %s",
		esc(d.Name), esc(d.Model), d.SizeBytes>>30, d.Rotational, d.LogicalBlock, esc(d.Scheduler), esc(d.MountSource), esc(d.MountFSType), esc(d.MountPoint), esc(d.MountOptions)))
	kv("work directory", esc(env.WorkDir)+map[bool]string{true: " (temporary, removed)", false: " (kept)"}[env.TempWorkDir])
	kv("sluice version", esc(env.SluiceVersion)+", "+esc(env.GoVersion))
	fio := env.Fio
	if fio == "" {
		fio = "not used (the built-in Go runner ran the peers)"
	}
	kv("fio", esc(fio))
	kv("root", fmt.Sprint(env.Root))
	kv("cold", esc(env.ColdMethod))
	for _, k := range sortedKeys(env.Options) {
		label := "Options.String(), " + k
		if k == "device" {
			label = "data device options"
		}
		kv(label, "<code>"+esc(env.Options[k])+"</code>")
	}
	for _, v := range env.Volumes {
		kv("volume: "+v.Role, fmt.Sprintf("<code>%s</code>: %d MiB image, %d B blocks, %d B I/O unit; file <code>%s</code> of %d MiB",
			esc(v.Path), v.SizeBytes>>20, v.BlockSize, v.IOUnit, esc(v.File), v.FileBytes>>20))
	}
	for _, p := range env.Peers {
		kv("peer: "+p.Label, fmt.Sprintf("<code>%s</code> (%s on %s), runner %s. %s", esc(p.Dir), esc(p.FSType), esc(p.Device), esc(p.Runner), esc(p.Setup)))
	}
	for _, n := range env.Notes {
		kv("note", esc(n))
	}
	h.p("</table>\n")
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	// classic, the toggles, concurrent, then device.
	rank := func(k string) string {
		switch {
		case k == PolicyClassic:
			return "0"
		case k == PolicyConcurrent:
			return "2"
		case k == "device":
			return "3"
		}
		return "1" + k
	}
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && rank(ks[j]) < rank(ks[j-1]); j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return ks
}

// table renders t; withTitle puts its title above it.
func (h *htmlWriter) table(t *table, withTitle bool) {
	if withTitle && t.title != "" {
		h.p("<h3>%s</h3>\n", esc(strings.TrimSuffix(t.title, ":")))
	}
	h.p("<div class=\"tables\"><table>\n<tr>")
	for i, c := range t.header {
		cls := ""
		if i > 0 && len(t.rows) > 0 && i < len(t.rows[0]) && !numericCell(t.rows[0][i]) {
			cls = " class=\"t\""
		}
		h.p("<th%s>%s</th>", cls, esc(c))
	}
	h.p("</tr>\n")
	for _, r := range t.rows {
		h.p("<tr>")
		for _, c := range r {
			cls := ""
			switch {
			case c == "err":
				cls = " class=\"err\""
			case !numericCell(c):
				cls = " class=\"t\""
			}
			h.p("<td%s>%s</td>", cls, esc(c))
		}
		h.p("</tr>\n")
	}
	h.p("</table></div>\n")
}

func (h *htmlWriter) experiment(e *Experiment) {
	h.p("<h2 id=\"%s\">%s (seed %s): %s</h2>\n", esc(e.ID), esc(e.ID), esc(e.Seed), esc(e.Title))
	h.p("<p>%s</p>\n", esc(e.Workload))
	for _, n := range e.Notes {
		h.p("<p class=\"note\">%s</p>\n", esc(n))
	}
	h.p("<div class=\"seed\"><b>The seed's own numbers.</b> %s</div>\n", esc(e.SeedNumbers))
	if s := e.spreadSummary(); s != "" {
		h.p("<p class=\"note\">%s</p>\n", esc(s))
	}
	switch e.ID {
	case "W1":
		h.chartsW1(e)
	case "W2":
		h.chartsW2(e)
	case "W3":
		h.chartsW3(e)
	case "W4":
		h.chartsW4(e)
	case "W5":
		h.chartsW5(e)
	}
	h.p("<div class=\"tblgrid\">\n")
	for _, t := range e.tables() {
		h.p("<div>")
		h.table(t, true)
		h.p("</div>\n")
	}
	h.p("</div>\n")
	var errs []string
	for _, row := range e.Rows {
		if row.Error != "" {
			errs = append(errs, fmt.Sprintf("%s %s %s: %s", row.Target, row.Policy, keyParams(row.Params), row.Error))
		}
	}
	if len(errs) > 0 {
		h.p("<p class=\"err\"><b>Failed cells:</b><br>%s</p>\n", strings.Join(mapEsc(errs), "<br>"))
	}
	h.p("<details><summary>How each %s row ran (Options strings and command lines)</summary><table class=\"kv\">\n", esc(e.ID))
	for _, row := range e.Rows {
		how := ""
		for _, k := range []string{"options", "workload", "cmdline", "cold"} {
			if v, ok := row.Params[k]; ok && fmt.Sprint(v) != "" {
				how += fmt.Sprintf("<div><b>%s</b> <code>%s</code></div>", k, esc(fmt.Sprint(v)))
			}
		}
		h.p("<tr><td>%s %s %s</td><td>%s</td></tr>\n", esc(row.Target), esc(row.Policy), esc(keyParams(row.Params)), how)
	}
	h.p("</table></details>\n")
}

// numericRE matches a table cell that reads as a number (right
// aligned): counts, ratios, percentages, "a/b" pairs, with an optional
// remark ("1.30x (4 GiB run)", "0.59x of fio:raw").
var numericRE = regexp.MustCompile(`^[0-9][0-9.]*(x|%)?(/[0-9][0-9.]*(x|%)?)*( \(.*\)| of .*)?$`)

func numericCell(c string) bool {
	return c == "-" || c == "" || c == "err" || c == "shared" || numericRE.MatchString(c)
}

func mapEsc(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = esc(x)
	}
	return out
}

// Colours: classic warm, concurrent blue, toggles purple, peers greys
// and greens.
var peerColours = []string{"#2ca02c", "#7f7f7f", "#8c564b", "#17becf", "#bcbd22"}

func seriesColour(s series, peerIndex int) string {
	if s.Target == TargetEngine {
		switch s.Policy {
		case PolicyClassic:
			return "#e6550d"
		case PolicyConcurrent:
			return "#1f5fbf"
		}
		return "#9467bd"
	}
	return peerColours[peerIndex%len(peerColours)]
}

// styledSeries are an experiment's series with colours and labels.
type styledSeries struct {
	s      series
	colour string
	label  string
	dashed bool
}

func styled(e *Experiment) []styledSeries {
	var out []styledSeries
	pi := 0
	for _, s := range e.series() {
		st := styledSeries{s: s, label: s.label()}
		if s.Target == TargetEngine {
			st.label = "engine " + st.label
			st.colour = seriesColour(s, 0)
		} else {
			st.colour = seriesColour(s, pi)
			st.dashed = true
			pi++
		}
		out = append(out, st)
	}
	return out
}

func (h *htmlWriter) legend(ss []styledSeries) {
	h.p("<div class=\"legend\">")
	for _, s := range ss {
		style := "background:" + s.colour
		if s.dashed {
			style = "border:2px dashed " + s.colour + ";width:10px;height:6px"
		}
		h.p("<span><span class=\"sw\" style=\"%s\"></span>%s</span>", style, esc(s.label))
	}
	h.p("</div>\n")
}

// axis is a y axis: linear from 0 or logarithmic.
type axis struct {
	log    bool
	lo, hi float64 // data range of the axis (log: powers of ten)
}

func newAxis(vals []float64, log bool) axis {
	hi := 0.0
	lo := math.Inf(1)
	for _, v := range vals {
		if !math.IsNaN(v) && v > 0 {
			hi = max(hi, v)
			lo = min(lo, v)
		}
	}
	if hi == 0 {
		hi = 1
	}
	if log {
		if math.IsInf(lo, 1) {
			lo = 1
		}
		return axis{log: true, lo: math.Pow(10, math.Floor(math.Log10(lo))), hi: math.Pow(10, math.Ceil(math.Log10(hi*1.05)))}
	}
	return axis{hi: niceCeil(hi * 1.12)}
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// frac maps v to [0, 1] of the axis height.
func (a axis) frac(v float64) float64 {
	if a.log {
		if v <= 0 {
			return 0
		}
		return math.Max(0, (math.Log10(v)-math.Log10(a.lo))/(math.Log10(a.hi)-math.Log10(a.lo)))
	}
	return v / a.hi
}

// ticks returns tick values.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for v := a.lo; v <= a.hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := a.hi / 5
	if a.hi/4 == niceCeil(a.hi/4) {
		step = a.hi / 4
	}
	for v := 0.0; v <= a.hi*1.0001; v += step {
		out = append(out, v)
	}
	return out
}

// fmtTick renders an axis value compactly.
func fmtTick(v float64) string {
	switch {
	case v >= 1e6:
		return trimZero(fmt.Sprintf("%.1fM", v/1e6))
	case v >= 1e3:
		return trimZero(fmt.Sprintf("%.1fk", v/1e3))
	case v >= 10 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return trimZero(fmt.Sprintf("%.1f", v))
	}
	return trimZero(fmt.Sprintf("%.2f", v))
}

func trimZero(s string) string {
	return strings.Replace(strings.Replace(s, ".0k", "k", 1), ".0M", "M", 1)
}

// chart geometry.
type frame struct {
	w, h                   int
	left, right, top, bott int
}

func (f frame) plotW() float64 { return float64(f.w - f.left - f.right) }
func (f frame) plotH() float64 { return float64(f.h - f.top - f.bott) }
func (f frame) y(a axis, v float64) float64 {
	return float64(f.top) + f.plotH()*(1-a.frac(v))
}

// svgStart opens an SVG with a title and the y axis grid.
func (h *htmlWriter) svgStart(f frame, title, ylabel string, a axis) {
	h.p("<div class=\"chart\"><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"system-ui,sans-serif\" font-size=\"11\">\n", f.w, f.h, f.w, f.h)
	h.p("<text x=\"%d\" y=\"16\" font-size=\"13\" font-weight=\"600\">%s</text>\n", f.left, esc(title))
	for _, t := range a.ticks() {
		y := f.y(a, t)
		h.p("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e8eb\"/>\n", f.left, f.w-f.right, y, y)
		h.p("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#5a6270\">%s</text>\n", f.left-5, y+4, fmtTick(t))
	}
	h.p("<text transform=\"translate(12 %.1f) rotate(-90)\" text-anchor=\"middle\" fill=\"#5a6270\">%s</text>\n", float64(f.top)+f.plotH()/2, esc(ylabel))
	h.p("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#9aa1ab\"/>\n", f.left, f.w-f.right, f.y(a, a.lo), f.y(a, a.lo))
}

func (h *htmlWriter) svgEnd() { h.p("</svg></div>\n") }

// lineChart draws one line per series over xs (placed evenly), with
// labels above points (ratio labels).
func (h *htmlWriter) lineChart(title, ylabel string, xs []string, xlabel string, ss []styledSeries, vals [][]float64, labels []string, w int) {
	h.lineChartSpread(title, ylabel, xs, xlabel, ss, vals, nil, labels, w)
}

// lineChartSpread is lineChart with, where spans has them, a vertical
// bar from the smallest to the largest sample of each point.
func (h *htmlWriter) lineChartSpread(title, ylabel string, xs []string, xlabel string, ss []styledSeries, vals [][]float64, spans [][][2]float64, labels []string, w int) {
	var all []float64
	for _, v := range vals {
		all = append(all, v...)
	}
	for _, sp := range spans {
		for _, r := range sp {
			all = append(all, r[1])
		}
	}
	a := newAxis(all, false)
	f := frame{w: w, h: 300, left: 58, right: 16, top: 30, bott: 42}
	h.svgStart(f, title, ylabel, a)
	x := func(i int) float64 { return float64(f.left) + f.plotW()*(float64(i)+0.5)/float64(len(xs)) }
	for i, l := range xs {
		h.p("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#5a6270\">%s</text>\n", x(i), f.h-f.bott+15, esc(l))
	}
	h.p("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#5a6270\">%s</text>\n", float64(f.left)+f.plotW()/2, f.h-6, esc(xlabel))
	for si, s := range ss {
		var pts []string
		for i, v := range vals[si] {
			if math.IsNaN(v) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), f.y(a, v)))
		}
		dash := ""
		if s.dashed {
			dash = " stroke-dasharray=\"5 3\""
		}
		if si < len(spans) {
			for i, r := range spans[si] {
				if r[1] > r[0] {
					h.p("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-opacity=\"0.35\" stroke-width=\"5\"><title>%s: runs from %s to %s</title></line>\n",
						x(i)+float64(si*3-3), x(i)+float64(si*3-3), f.y(a, r[0]), f.y(a, r[1]), s.colour, esc(s.label), fmtTick(r[0]), fmtTick(r[1]))
				}
			}
		}
		h.p("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"%s\"/>\n", s.colour, dash, strings.Join(pts, " "))
		for i, v := range vals[si] {
			if !math.IsNaN(v) {
				h.p("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s: %s</title></circle>\n", x(i), f.y(a, v), s.colour, esc(s.label), fmtTick(v))
			}
		}
	}
	// Ratio labels above the highest point of each x.
	for i, l := range labels {
		if l == "" {
			continue
		}
		top := math.Inf(1)
		for si := range ss {
			if v := vals[si][i]; !math.IsNaN(v) {
				top = math.Min(top, f.y(a, v))
			}
		}
		if math.IsInf(top, 1) {
			continue
		}
		h.p("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"600\" fill=\"#1f5fbf\">%s</text>\n", x(i), math.Max(top-8, float64(f.top)+2), esc(l))
	}
	h.svgEnd()
}

// barChart draws groups of bars, one bar per series, with a label above
// each group (ratio labels) and the value on each bar.
func (h *htmlWriter) barChart(title, ylabel string, groups []string, ss []styledSeries, vals [][]float64, labels []string, log bool, w int) {
	var all []float64
	for _, v := range vals {
		all = append(all, v...)
	}
	a := newAxis(all, log)
	f := frame{w: w, h: 320, left: 58, right: 12, top: 46, bott: 46}
	if log {
		ylabel += " (log scale)"
	}
	h.svgStart(f, title, ylabel, a)
	gw := f.plotW() / float64(len(groups))
	bw := math.Min(34, gw*0.8/float64(max(len(ss), 1)))
	for gi, g := range groups {
		gx := float64(f.left) + gw*float64(gi)
		x0 := gx + (gw-bw*float64(len(ss)))/2
		h.p("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#1d2330\">%s</text>\n", gx+gw/2, f.h-f.bott+15, esc(g))
		top := f.y(a, a.lo)
		for si, s := range ss {
			v := vals[gi][si]
			x := x0 + bw*float64(si)
			if math.IsNaN(v) {
				continue
			}
			y := f.y(a, v)
			if log && v <= 0 {
				y = f.y(a, a.lo)
			}
			top = math.Min(top, y)
			hgt := f.y(a, a.lo) - y
			h.p("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s, %s: %s</title></rect>\n",
				x+1, y, bw-2, math.Max(hgt, 0.5), s.colour, esc(s.label), esc(g), fmtTick(v))
			h.p("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\" fill=\"#3a4250\">%s</text>\n", x+bw/2, y-3, fmtTick(v))
		}
		if gi < len(labels) && labels[gi] != "" {
			h.p("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"600\" fill=\"#1f5fbf\">%s</text>\n", gx+gw/2, math.Max(top-14, float64(f.top)-6), esc(labels[gi]))
		}
	}
	h.svgEnd()
}

// sampleSpan returns the smallest and largest sample of a row's metric
// (zeros when there is only one run).
func sampleSpan(r *Row, m string) [2]float64 {
	if r == nil || len(r.Samples[m]) < 2 {
		return [2]float64{}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range r.Samples[m] {
		lo, hi = min(lo, x), max(hi, x)
	}
	return [2]float64{lo, hi}
}

// metricOf returns a row's metric or NaN.
func metricOf(r *Row, m string) float64 {
	if v, ok := r.Metric(m); ok {
		return v
	}
	return math.NaN()
}

func ratioLabel(num, den *Row, m, prefix string) string {
	v, ok := ratio(num, den, m)
	if !ok {
		return ""
	}
	return prefix + fmtRatio(v, true)
}

func (h *htmlWriter) chartsW1(e *Experiment) {
	ss := styled(e)
	h.legend(ss)
	h.p("<p class=\"note\">Lines join the medians; the pale bars span the repeated runs (min to max). Blue labels: engine concurrent / classic at each thread count (seed 001 at 32 threads: 512 B x9.1, 4 KiB x16.3, 16 KiB x8.3).</p>\n")
	h.p("<div class=\"charts\">\n")
	var xs []string
	for _, n := range w1Threads {
		xs = append(xs, fmt.Sprint(n))
	}
	for _, bs := range w1BS {
		vals := make([][]float64, len(ss))
		spans := make([][][2]float64, len(ss))
		for si, s := range ss {
			for _, n := range w1Threads {
				row := e.Find(s.s.Target, s.s.Policy, map[string]any{"bs": bs, "threads": n})
				vals[si] = append(vals[si], metricOf(row, "iops"))
				spans[si] = append(spans[si], sampleSpan(row, "iops"))
			}
		}
		var labels []string
		for _, n := range w1Threads {
			k := map[string]any{"bs": bs, "threads": n}
			labels = append(labels, ratioLabel(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "iops", ""))
		}
		h.lineChartSpread(fmt.Sprintf("%s reads: IOPS by readers", bsName(bs)), "IOPS", xs, "readers (goroutines / fio jobs)", ss, vals, spans, labels, 385)
	}
	h.p("</div>\n")
	// Speed-up against the seed's.
	sp := []styledSeries{}
	var spv [][]float64
	cols := []string{"#d62728", "#1f5fbf", "#2ca02c"}
	for i, bs := range w1BS {
		var ours, seed []float64
		for _, n := range w1Threads {
			k := map[string]any{"bs": bs, "threads": n}
			v, ok := ratio(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "iops")
			if !ok {
				v = math.NaN()
			}
			ours = append(ours, v)
			s, _ := seed001Ratio(bs, n)
			seed = append(seed, s)
		}
		sp = append(sp, styledSeries{label: "sluice " + bsName(bs), colour: cols[i]},
			styledSeries{label: "seed 001 " + bsName(bs), colour: cols[i], dashed: true})
		spv = append(spv, ours, seed)
	}
	h.p("<h3>Speed-up (concurrent / classic) against seed 001's after / before</h3>\n")
	h.legend(sp)
	h.p("<div class=\"charts\">\n")
	h.lineChart("speed-up by readers (dashed: seed 001)", "x speed-up", xs, "readers", sp, spv, nil, 620)
	h.p("</div>\n")
}

func (h *htmlWriter) chartsW2(e *Experiment) {
	ss := styled(e)
	h.legend(ss)
	noOUW := without("OptimisticUnalignedWrites").label
	var groups []string
	var vals [][]float64
	var labels []string
	for _, bs := range w2BS {
		k := map[string]any{"bs": bs}
		groups = append(groups, bsName(bs)+" randrw QD32")
		var row []float64
		for _, s := range ss {
			row = append(row, metricOf(e.Find(s.s.Target, s.s.Policy, k), "iops"))
		}
		vals = append(vals, row)
		conc := e.Find(TargetEngine, PolicyConcurrent, k)
		labels = append(labels, strings.TrimSpace(ratioLabel(conc, e.Find(TargetEngine, PolicyClassic, k), "iops", "vs classic ")+"   "+
			ratioLabel(conc, e.Find(TargetEngine, noOUW, k), "iops", "vs w/o 000 ")))
	}
	h.p("<p class=\"note\">Blue labels: engine concurrent against classic, and against concurrent without seed 000's toggle (the seed's own before: x8.4 at 512 B, x1.0 at 4 KiB).</p>\n")
	h.p("<div class=\"charts\">\n")
	h.barChart("read + write IOPS", "IOPS", groups, ss, vals, labels, false, 900)
	h.p("</div>\n")
}

func (h *htmlWriter) chartsW3(e *Experiment) {
	ss := styled(e)
	h.legend(ss)
	var groups, labels []string
	var vals [][]float64
	for _, l := range w3Layouts {
		k := map[string]any{"rings": l}
		groups = append(groups, "ring "+l)
		var row []float64
		for _, s := range ss {
			row = append(row, metricOf(e.Find(s.s.Target, s.s.Policy, k), "iops"))
		}
		vals = append(vals, row)
		labels = append(labels, ratioLabel(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "iops", "parallel/hashed "))
	}
	h.p("<p class=\"note\">Classic = hashed punts, concurrent = parallel punts; peers (fio io_uring, 8 jobs) appear under 'per-submitter', as each fio job has its own io-wq. Seed 002: x1.04.</p>\n")
	h.p("<div class=\"charts\">\n")
	h.barChart("4 KiB O_DIRECT random writes, 8 x 8 in flight", "IOPS", groups, ss, vals, labels, false, 700)
	h.p("</div>\n")
}

func (h *htmlWriter) chartsW4(e *Experiment) {
	ss := styled(e)
	h.legend(ss)
	var engine []styledSeries
	for _, s := range ss {
		if s.s.Target == TargetEngine {
			engine = append(engine, s)
		}
	}
	chart := func(title, ylabel, metric string, set []styledSeries, label func(k map[string]any) string, scale float64, w int) {
		var groups, labels []string
		var vals [][]float64
		for _, d := range w4Depths {
			k := map[string]any{"depth": d}
			groups = append(groups, fmt.Sprintf("QD%d", d))
			var row []float64
			for _, s := range set {
				row = append(row, metricOf(e.Find(s.s.Target, s.s.Policy, k), metric)*scale)
			}
			vals = append(vals, row)
			if label != nil {
				labels = append(labels, label(k))
			}
		}
		h.barChart(title, ylabel, groups, set, vals, labels, false, w)
	}
	h.p("<p class=\"note\">Blue labels: engine concurrent / classic. Seed 003: x1.09, x1.05, x1.38, x2.05, x1.74 at depths 1-16 (fio), x1.30 at QD32 with 0.49x the CPU per read (4 GiB run). " +
		"Peers' CPU is fio's jobs' (usr_cpu + sys_cpu, kernel io_uring workers included), the engine's the whole bench process's.</p>\n")
	h.p("<div class=\"charts\">\n")
	chart("cold random 4 KiB buffered reads: IOPS", "IOPS", "iops", ss, func(k map[string]any) string {
		return ratioLabel(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "iops", "")
	}, 1, 1200)
	chart("CPU time per read (getrusage user+system)", "us per read", "cpu_ns_per_io", ss, func(k map[string]any) string {
		return ratioLabel(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "cpu_ns_per_io", "")
	}, 1e-3, 1200)
	chart("peak blocked pool workers (engine)", "workers", "blocked_workers_max", engine, nil, 1, 590)
	chart("peak goroutines of the process (engine)", "goroutines", "goroutines_max", engine, nil, 1, 590)
	h.p("</div>\n")
}

func (h *htmlWriter) chartsW5(e *Experiment) {
	ss := styled(e)
	h.legend(ss)
	h.p("<p class=\"note\">Blue labels: engine concurrent / classic. Seed 004: buffered x10.9 / x11.4 / x11.5, O_SYNC x1.2 / x2.7 / x8.2 at 4 / 32 / 512 KiB. " +
		"Peers have no I/O unit setting and appear in both charts. Log scales: O_SYNC and plain writes differ by orders of magnitude.</p>\n")
	h.p("<div class=\"charts\">\n")
	for _, u := range []int{4096, 65536} {
		var groups, labels []string
		var vals, reads [][]float64
		var engine []styledSeries
		for _, s := range ss {
			if s.s.Target == TargetEngine {
				engine = append(engine, s)
			}
		}
		for _, sync := range w5Syncs {
			for _, bs := range w5BS {
				k := map[string]any{"io_unit": u, "bs": bs, "sync": sync}
				pk := map[string]any{"bs": bs, "sync": sync}
				groups = append(groups, syncName(sync)+" "+bsName(bs))
				var row, rrow []float64
				for _, s := range ss {
					kk := k
					if s.s.Target != TargetEngine {
						kk = pk
					}
					row = append(row, metricOf(e.Find(s.s.Target, s.s.Policy, kk), "mib_s"))
				}
				for _, s := range engine {
					rrow = append(rrow, metricOf(e.Find(s.s.Target, s.s.Policy, k), "device_reads_per_mib"))
				}
				vals = append(vals, row)
				reads = append(reads, rrow)
				labels = append(labels, ratioLabel(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "mib_s", ""))
			}
		}
		h.barChart(fmt.Sprintf("%s I/O unit: overwrite MiB/s", bsName(u)), "MiB/s", groups, ss, vals, labels, true, 1200)
		h.barChart(fmt.Sprintf("%s I/O unit: engine device reads per MiB written (0 drawn at the baseline)", bsName(u)), "reads per MiB", groups, engine, reads, nil, true, 1200)
	}
	h.p("</div>\n")
}
