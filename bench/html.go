package bench

import (
	"bufio"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The HTML report: the page is report.html.tmpl, rendered by html/template,
// which escapes every string of the report in its context. The Go side
// only builds the page's data (htmlPage): the environment as key/value
// rows, the text report's tables, and each chart as a list of SVG
// elements with their coordinates.

//go:embed report.html.tmpl
var reportHTML string

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	// f1 renders a coordinate with one decimal.
	"f1": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
}).Parse(reportHTML))

// WriteHTML writes the report as one self-contained HTML page: the
// environment, the headline ratios against the seeds, and per
// experiment its description, the seed's numbers, SVG charts and the
// same tables as the text report. No scripts, fonts or images are
// fetched.
func (r *Report) WriteHTML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	if err := reportTemplate.Execute(bw, r.htmlPage()); err != nil {
		return err
	}
	return bw.Flush()
}

// htmlPage is the data of report.html.tmpl.
type htmlPage struct {
	Env         *Env
	Noise       string
	EnvRows     []kvRow
	Headlines   *htmlTable // nil when there are none
	FirstPeer   string
	Experiments []htmlExperiment
}

// kvRow is a row of a key/value table; its value is text with code
// spans.
type kvRow struct {
	Key   string
	Value []span
}

type span struct {
	Text string
	Code bool // rendered as <code>
}

type htmlTable struct {
	Title  string
	Header []htmlCell
	Rows   [][]htmlCell
}

type htmlCell struct{ Text, Class string }

type htmlExperiment struct {
	ID, Seed, Title, Workload, SeedNumbers, Goal string
	// Heading is "W1 (seed 001)" or "A1 (beyond the seeds)".
	Heading string
	Notes   []string
	// Spread is the note on the repeated runs' spread ("" for none).
	Spread string
	Charts []chartBlock
	Tables []htmlTable
	// Errors are the failed cells.
	Errors []string
	// How says how each row ran.
	How []howRow
}

type howRow struct {
	Label string
	Items []howItem
}

type howItem struct{ Key, Value string }

// chartBlock is a heading (optional), a legend, a note and a row of
// charts.
type chartBlock struct {
	Heading string
	Legend  []legendItem
	Note    string
	Charts  []*svgChart
}

type legendItem struct {
	Label, Colour string
	Dashed        bool
}

// svgChart is one SVG picture: its elements in drawing order.
type svgChart struct {
	W, H  int
	Elems []svgElem
}

// svgElem is one element: exactly one field is set.
type svgElem struct {
	Line   *svgLine
	Text   *svgText
	Poly   *svgPolyline
	Circle *svgCircle
	Rect   *svgRect
}

type svgLine struct {
	X1, X2, Y1, Y2 float64
	Stroke         string
	// Width, when set, draws a pale bar of that width (a spread).
	Width int
	Title string
}

type svgText struct {
	X, Y   float64
	Anchor string // text-anchor, "" for start
	Size   int    // font-size, 0 for the chart's
	Bold   bool
	Fill   string
	// Rotate turns the text a quarter left about (X, Y) (a y axis label).
	Rotate bool
	Text   string
}

type svgPolyline struct {
	Points string
	Stroke string
	Dashed bool
}

type svgCircle struct {
	X, Y        float64
	Fill, Title string
}

type svgRect struct {
	X, Y, W, H  float64
	Fill, Title string
}

func (c *svgChart) line(l svgLine)         { c.Elems = append(c.Elems, svgElem{Line: &l}) }
func (c *svgChart) text(t svgText)         { c.Elems = append(c.Elems, svgElem{Text: &t}) }
func (c *svgChart) polyline(p svgPolyline) { c.Elems = append(c.Elems, svgElem{Poly: &p}) }
func (c *svgChart) circle(o svgCircle)     { c.Elems = append(c.Elems, svgElem{Circle: &o}) }
func (c *svgChart) rect(r svgRect)         { c.Elems = append(c.Elems, svgElem{Rect: &r}) }

// Text colours of the charts.
const (
	mutedInk = "#5a6270" // axes and their labels
	ratioInk = "#1f5fbf" // ratio labels
)

func (r *Report) htmlPage() *htmlPage {
	p := &htmlPage{Env: &r.Env, Noise: r.noiseWarning(), EnvRows: r.envRows(), FirstPeer: firstPeerLabel(r)}
	if t := r.headlineTable(); t != nil {
		ht := htmlTableOf(t)
		ht.Title = ""
		p.Headlines = &ht
	}
	for i := range r.Experiments {
		p.Experiments = append(p.Experiments, htmlExperimentOf(&r.Experiments[i]))
	}
	return p
}

func firstPeerLabel(r *Report) string {
	if len(r.Env.Peers) == 0 {
		return "none"
	}
	return r.Env.Peers[0].Label
}

// text and code are the spans of a key/value row.
func text(s string) span { return span{Text: s} }
func code(s string) span { return span{Text: s, Code: true} }

func (r *Report) envRows() []kvRow {
	env := &r.Env
	var rows []kvRow
	kv := func(k string, v ...span) { rows = append(rows, kvRow{k, v}) }
	kv("command", code(env.Command))
	kv("started / wall time", text(fmt.Sprintf("%s, %.0f s", env.Started, env.WallSeconds)))
	kv("sizing", text(fmt.Sprintf("%s: W1-W4 file %d MiB, W5 file %d MiB, A1 file at most %d MiB, Z1 region %d MiB; cells of %.2f s after %.2f s warm-up; median of %d runs (W5 %d, peers %d)",
		env.Sizing, env.DataBytes>>20, env.W5Bytes>>20, env.A1Bytes>>20, env.Z1Bytes>>20, env.CellSeconds, env.WarmupSeconds, env.Reps, env.W5Reps, env.PeerReps)))
	kv("kernel", text(env.Kernel))
	kv("CPUs", text(fmt.Sprintf("%d x %s; memory %d GiB", env.CPUs, env.CPUModel, env.MemoryBytes>>30)))
	kv("machine load", text(fmt.Sprintf("loadavg %s before the run, %s at its end; all CPUs %.0f%% busy over the run, %.0f%% by other processes",
		env.LoadAvgStart, env.LoadAvgEnd, env.MachineBusyPct, env.OthersBusyPct)))
	d := env.Device
	kv("device", text(fmt.Sprintf("%s %s, %d GiB, rotational %t, logical block %d B, scheduler %s; %s (%s) mounted at %s with %s",
		d.Name, d.Model, d.SizeBytes>>30, d.Rotational, d.LogicalBlock, d.Scheduler, d.MountSource, d.MountFSType, d.MountPoint, d.MountOptions)))
	kept := " (kept)"
	if env.TempWorkDir {
		kept = " (temporary, removed)"
	}
	kv("work directory", text(env.WorkDir+kept))
	kv("sluice version", text(env.SluiceVersion+", "+env.GoVersion))
	fio := env.Fio
	if fio == "" {
		fio = "not used (the built-in Go runner ran the peers)"
	}
	kv("fio", text(fio))
	kv("root", text(fmt.Sprint(env.Root)))
	kv("cold", text(env.ColdMethod))
	for _, k := range sortedKeys(env.Options) {
		label := "Options.String(), " + k
		if k == "device" {
			label = "data device options"
		}
		kv(label, code(env.Options[k]))
	}
	for _, v := range env.Volumes {
		kv("volume: "+v.Role, code(v.Path), text(fmt.Sprintf(": %d MiB image, %d B blocks, %d B I/O unit; file ", v.SizeBytes>>20, v.BlockSize, v.IOUnit)),
			code(v.File), text(fmt.Sprintf(" of %d MiB", v.FileBytes>>20)))
	}
	for _, p := range env.Peers {
		kv("peer: "+p.Label, code(p.Dir), text(fmt.Sprintf(" (%s on %s), runner %s. %s", p.FSType, p.Device, p.Runner, p.Setup)))
	}
	for _, n := range env.Notes {
		kv("note", text(n))
	}
	return rows
}

// sortedKeys returns the policy labels of m in the order classic, the
// toggles, concurrent, then device.
func sortedKeys(m map[string]string) []string {
	rank := func(k string) string {
		switch k {
		case PolicyClassic:
			return "0"
		case PolicyConcurrent:
			return "2"
		case "device":
			return "3"
		}
		return "1" + k
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b string) int { return strings.Compare(rank(a), rank(b)) })
	return ks
}

// htmlTableOf is t with each cell's alignment class: text left, numbers
// right (the default), errors red.
func htmlTableOf(t *table) htmlTable {
	ht := htmlTable{Title: strings.TrimSuffix(t.title, ":")}
	for i, c := range t.header {
		cell := htmlCell{Text: c}
		if i > 0 && len(t.rows) > 0 && i < len(t.rows[0]) && !numericCell(t.rows[0][i]) {
			cell.Class = "t"
		}
		ht.Header = append(ht.Header, cell)
	}
	for _, r := range t.rows {
		var row []htmlCell
		for _, c := range r {
			cell := htmlCell{Text: c}
			switch {
			case c == "err":
				cell.Class = "err"
			case !numericCell(c):
				cell.Class = "t"
			}
			row = append(row, cell)
		}
		ht.Rows = append(ht.Rows, row)
	}
	return ht
}

func htmlExperimentOf(e *Experiment) htmlExperiment {
	he := htmlExperiment{ID: e.ID, Seed: e.Seed, Title: e.Title, Workload: e.Workload, SeedNumbers: e.SeedNumbers, Goal: e.Goal,
		Heading: e.heading(), Notes: e.Notes, Spread: e.spreadSummary()}
	switch e.ID {
	case "W1":
		he.Charts = chartsW1(e)
	case "W2":
		he.Charts = chartsW2(e)
	case "W3":
		he.Charts = chartsW3(e)
	case "W4":
		he.Charts = chartsW4(e)
	case "W5":
		he.Charts = chartsW5(e)
	case "A1":
		he.Charts = chartsA1(e)
	case "Z1":
		he.Charts = chartsZ1(e)
	}
	for _, t := range e.tables() {
		he.Tables = append(he.Tables, htmlTableOf(t))
	}
	for _, row := range e.Rows {
		if row.Error != "" {
			he.Errors = append(he.Errors, fmt.Sprintf("%s %s %s: %s", row.Target, row.Policy, keyParams(row.Params), row.Error))
		}
		how := howRow{Label: fmt.Sprintf("%s %s %s", row.Target, row.Policy, keyParams(row.Params))}
		for _, k := range []string{"options", "workload", "cmdline", "cold"} {
			if v, ok := row.Params[k]; ok && fmt.Sprint(v) != "" {
				how.Items = append(how.Items, howItem{k, fmt.Sprint(v)})
			}
		}
		he.How = append(he.How, how)
	}
	return he
}

// numericRE matches a table cell that reads as a number (right
// aligned): counts, ratios, percentages, "a/b" pairs, with an optional
// remark ("1.30x (4 GiB run)", "0.59x of fio:raw").
var numericRE = regexp.MustCompile(`^[0-9][0-9.]*(x|%)?(/[0-9][0-9.]*(x|%)?)*( \(.*\)| of .*)?$`)

func numericCell(c string) bool {
	return c == "-" || c == "" || c == "err" || c == "shared" || numericRE.MatchString(c)
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

// engineOnly returns the engine's series of ss.
func engineOnly(ss []styledSeries) []styledSeries {
	var out []styledSeries
	for _, s := range ss {
		if s.s.Target == TargetEngine {
			out = append(out, s)
		}
	}
	return out
}

func legend(ss []styledSeries) []legendItem {
	out := make([]legendItem, len(ss))
	for i, s := range ss {
		out[i] = legendItem{Label: s.label, Colour: s.colour, Dashed: s.dashed}
	}
	return out
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

// newChart starts a chart with a title and the y axis grid.
func newChart(f frame, title, ylabel string, a axis) *svgChart {
	c := &svgChart{W: f.w, H: f.h}
	c.text(svgText{X: float64(f.left), Y: 16, Size: 13, Bold: true, Text: title})
	for _, t := range a.ticks() {
		y := f.y(a, t)
		c.line(svgLine{X1: float64(f.left), X2: float64(f.w - f.right), Y1: y, Y2: y, Stroke: "#e6e8eb"})
		c.text(svgText{X: float64(f.left - 5), Y: y + 4, Anchor: "end", Fill: mutedInk, Text: fmtTick(t)})
	}
	c.text(svgText{X: 12, Y: float64(f.top) + f.plotH()/2, Rotate: true, Anchor: "middle", Fill: mutedInk, Text: ylabel})
	base := f.y(a, a.lo)
	c.line(svgLine{X1: float64(f.left), X2: float64(f.w - f.right), Y1: base, Y2: base, Stroke: "#9aa1ab"})
	return c
}

// lineChart draws one line per series over xs (placed evenly), with
// labels above points (ratio labels) and, where spans has them, a
// vertical bar from the smallest to the largest sample of each point.
func lineChart(title, ylabel string, xs []string, xlabel string, ss []styledSeries, vals [][]float64, spans [][][2]float64, labels []string, w int) *svgChart {
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
	c := newChart(f, title, ylabel, a)
	x := func(i int) float64 { return float64(f.left) + f.plotW()*(float64(i)+0.5)/float64(len(xs)) }
	for i, l := range xs {
		c.text(svgText{X: x(i), Y: float64(f.h - f.bott + 15), Anchor: "middle", Fill: mutedInk, Text: l})
	}
	c.text(svgText{X: float64(f.left) + f.plotW()/2, Y: float64(f.h - 6), Anchor: "middle", Fill: mutedInk, Text: xlabel})
	for si, s := range ss {
		if si < len(spans) {
			for i, r := range spans[si] {
				if r[1] > r[0] {
					bx := x(i) + float64(si*3-3)
					c.line(svgLine{X1: bx, X2: bx, Y1: f.y(a, r[0]), Y2: f.y(a, r[1]), Stroke: s.colour, Width: 5,
						Title: fmt.Sprintf("%s: runs from %s to %s", s.label, fmtTick(r[0]), fmtTick(r[1]))})
				}
			}
		}
		var pts []string
		for i, v := range vals[si] {
			if !math.IsNaN(v) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), f.y(a, v)))
			}
		}
		c.polyline(svgPolyline{Points: strings.Join(pts, " "), Stroke: s.colour, Dashed: s.dashed})
		for i, v := range vals[si] {
			if !math.IsNaN(v) {
				c.circle(svgCircle{X: x(i), Y: f.y(a, v), Fill: s.colour, Title: s.label + ": " + fmtTick(v)})
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
		if !math.IsInf(top, 1) {
			c.text(svgText{X: x(i), Y: math.Max(top-8, float64(f.top)+2), Anchor: "middle", Bold: true, Fill: ratioInk, Text: l})
		}
	}
	return c
}

// barChart draws groups of bars, vals[group][series], with a label above
// each group (ratio labels) and the value on each bar.
func barChart(title, ylabel string, groups []string, ss []styledSeries, vals [][]float64, labels []string, log bool, w int) *svgChart {
	var all []float64
	for _, v := range vals {
		all = append(all, v...)
	}
	a := newAxis(all, log)
	f := frame{w: w, h: 320, left: 58, right: 12, top: 46, bott: 46}
	if log {
		ylabel += " (log scale)"
	}
	c := newChart(f, title, ylabel, a)
	gw := f.plotW() / float64(len(groups))
	bw := math.Min(34, gw*0.8/float64(max(len(ss), 1)))
	base := f.y(a, a.lo)
	for gi, g := range groups {
		gx := float64(f.left) + gw*float64(gi)
		x0 := gx + (gw-bw*float64(len(ss)))/2
		c.text(svgText{X: gx + gw/2, Y: float64(f.h - f.bott + 15), Anchor: "middle", Fill: "#1d2330", Text: g})
		top := base
		for si, s := range ss {
			v := vals[gi][si]
			if math.IsNaN(v) {
				continue
			}
			x := x0 + bw*float64(si)
			y := f.y(a, v)
			if log && v <= 0 {
				y = base
			}
			top = math.Min(top, y)
			c.rect(svgRect{X: x + 1, Y: y, W: bw - 2, H: math.Max(base-y, 0.5), Fill: s.colour,
				Title: fmt.Sprintf("%s, %s: %s", s.label, g, fmtTick(v))})
			c.text(svgText{X: x + bw/2, Y: y - 3, Anchor: "middle", Size: 9, Fill: "#3a4250", Text: fmtTick(v)})
		}
		if gi < len(labels) && labels[gi] != "" {
			c.text(svgText{X: gx + gw/2, Y: math.Max(top-14, float64(f.top)-6), Anchor: "middle", Bold: true, Fill: ratioInk, Text: labels[gi]})
		}
	}
	return c
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

// concLabel labels key k with the engine's concurrent/classic ratio of
// metric m.
func concLabel(e *Experiment, k map[string]any, m string) string {
	return ratioLabel(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), m, "")
}

// barValues returns, for each key, each series' metric m (times scale)
// and, with label, the key's label.
func barValues(e *Experiment, ss []styledSeries, keys []map[string]any, m string, scale float64, label func(map[string]any) string) (vals [][]float64, labels []string) {
	for _, k := range keys {
		var row []float64
		for _, s := range ss {
			row = append(row, metricOf(e.Find(s.s.Target, s.s.Policy, k), m)*scale)
		}
		vals = append(vals, row)
		if label != nil {
			labels = append(labels, label(k))
		}
	}
	return vals, labels
}

func chartsW1(e *Experiment) []chartBlock {
	ss := styled(e)
	b := chartBlock{Legend: legend(ss),
		Note: "Lines join the medians; the pale bars span the repeated runs (min to max). Blue labels: engine concurrent / classic at each thread count (seed 001 at 32 threads: 512 B x9.1, 4 KiB x16.3, 16 KiB x8.3)."}
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
			labels = append(labels, concLabel(e, map[string]any{"bs": bs, "threads": n}, "iops"))
		}
		b.Charts = append(b.Charts, lineChart(fmt.Sprintf("%s reads: IOPS by readers", bsName(bs)), "IOPS", xs, "readers (goroutines / fio jobs)", ss, vals, spans, labels, 385))
	}
	// Speed-up against the seed's.
	var sp []styledSeries
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
	speedup := chartBlock{Heading: "Speed-up (concurrent / classic) against seed 001's after / before", Legend: legend(sp),
		Charts: []*svgChart{lineChart("speed-up by readers (dashed: seed 001)", "x speed-up", xs, "readers", sp, spv, nil, nil, 620)}}
	return []chartBlock{b, speedup}
}

func chartsW2(e *Experiment) []chartBlock {
	ss := styled(e)
	noOUW := without("OptimisticUnalignedWrites").label
	var groups []string
	var keys []map[string]any
	for _, bs := range w2BS {
		groups = append(groups, bsName(bs)+" randrw QD32")
		keys = append(keys, map[string]any{"bs": bs})
	}
	vals, labels := barValues(e, ss, keys, "iops", 1, func(k map[string]any) string {
		conc := e.Find(TargetEngine, PolicyConcurrent, k)
		return strings.TrimSpace(ratioLabel(conc, e.Find(TargetEngine, PolicyClassic, k), "iops", "vs classic ") + "   " +
			ratioLabel(conc, e.Find(TargetEngine, noOUW, k), "iops", "vs w/o 000 "))
	})
	return []chartBlock{{Legend: legend(ss),
		Note:   "Blue labels: engine concurrent against classic, and against concurrent without seed 000's toggle (the seed's own before: x8.4 at 512 B, x1.0 at 4 KiB).",
		Charts: []*svgChart{barChart("read + write IOPS", "IOPS", groups, ss, vals, labels, false, 900)}}}
}

func chartsW3(e *Experiment) []chartBlock {
	ss := styled(e)
	var groups []string
	var keys []map[string]any
	for _, l := range w3Layouts {
		groups = append(groups, "ring "+l)
		keys = append(keys, map[string]any{"rings": l})
	}
	vals, labels := barValues(e, ss, keys, "iops", 1, func(k map[string]any) string {
		return ratioLabel(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicyClassic, k), "iops", "parallel/hashed ")
	})
	return []chartBlock{{Legend: legend(ss),
		Note:   "Classic = hashed punts, concurrent = parallel punts; peers (fio io_uring, 8 jobs) appear under 'per-submitter', as each fio job has its own io-wq. Seed 002: x1.04.",
		Charts: []*svgChart{barChart("4 KiB O_DIRECT random writes, 8 x 8 in flight", "IOPS", groups, ss, vals, labels, false, 700)}}}
}

func chartsW4(e *Experiment) []chartBlock {
	ss := styled(e)
	engine := engineOnly(ss)
	var groups []string
	var keys []map[string]any
	for _, d := range w4Depths {
		groups = append(groups, fmt.Sprintf("QD%d", d))
		keys = append(keys, map[string]any{"depth": d})
	}
	chart := func(title, ylabel, metric string, set []styledSeries, labelled bool, scale float64, w int) *svgChart {
		var label func(map[string]any) string
		if labelled {
			label = func(k map[string]any) string { return concLabel(e, k, metric) }
		}
		vals, labels := barValues(e, set, keys, metric, scale, label)
		return barChart(title, ylabel, groups, set, vals, labels, false, w)
	}
	return []chartBlock{{Legend: legend(ss),
		Note: "Blue labels: engine concurrent / classic. Seed 003: x1.09, x1.05, x1.38, x2.05, x1.74 at depths 1-16 (fio), x1.30 at QD32 with 0.49x the CPU per read (4 GiB run). " +
			"Peers' CPU is fio's jobs' (usr_cpu + sys_cpu, kernel io_uring workers included), the engine's the whole bench process's.",
		Charts: []*svgChart{
			chart("cold random 4 KiB buffered reads: IOPS", "IOPS", "iops", ss, true, 1, 1200),
			chart("CPU time per read (getrusage user+system)", "us per read", "cpu_ns_per_io", ss, true, 1e-3, 1200),
			chart("peak blocked pool workers (engine)", "workers", "blocked_workers_max", engine, false, 1, 590),
			chart("peak goroutines of the process (engine)", "goroutines", "goroutines_max", engine, false, 1, 590),
		}}}
}

func chartsW5(e *Experiment) []chartBlock {
	ss := styled(e)
	engine := engineOnly(ss)
	b := chartBlock{Legend: legend(ss),
		Note: "Blue labels: engine concurrent / classic. Seed 004: buffered x10.9 / x11.4 / x11.5, O_SYNC x1.2 / x2.7 / x8.2 at 4 / 32 / 512 KiB. " +
			"Peers have no I/O unit setting and appear in both charts. Log scales: O_SYNC and plain writes differ by orders of magnitude."}
	for _, u := range []int{4096, 65536} {
		var groups, labels []string
		var vals, reads [][]float64
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
				labels = append(labels, concLabel(e, k, "mib_s"))
			}
		}
		b.Charts = append(b.Charts,
			barChart(fmt.Sprintf("%s I/O unit: overwrite MiB/s", bsName(u)), "MiB/s", groups, ss, vals, labels, true, 1200),
			barChart(fmt.Sprintf("%s I/O unit: engine device reads per MiB written (0 drawn at the baseline)", bsName(u)), "reads per MiB", groups, engine, reads, nil, true, 1200))
	}
	return []chartBlock{b}
}

// seedsLabel labels key k with the engine's concurrent/seeds ratio of
// metric m (A1, Z1).
func seedsLabel(e *Experiment, k map[string]any, m string) string {
	return ratioLabel(e.Find(TargetEngine, PolicyConcurrent, k), e.Find(TargetEngine, PolicySeeds, k), m, "")
}

func chartsA1(e *Experiment) []chartBlock {
	ss := styled(e)
	b := chartBlock{Legend: legend(ss),
		Note: fmt.Sprintf("Lines join the medians; the pale bars span the repeated runs (min to max). Blue labels: engine concurrent / seeds at each appender count (the goal: at least %.0fx at 8 and more).", a1Goal)}
	var xs []string
	for _, n := range a1Appenders {
		xs = append(xs, fmt.Sprint(n))
	}
	for _, mode := range a1Modes {
		vals := make([][]float64, len(ss))
		spans := make([][][2]float64, len(ss))
		for si, s := range ss {
			for _, n := range a1Appenders {
				row := e.Find(s.s.Target, s.s.Policy, map[string]any{"mode": mode, "appenders": n})
				vals[si] = append(vals[si], metricOf(row, "iops"))
				spans[si] = append(spans[si], sampleSpan(row, "iops"))
			}
		}
		var labels []string
		for _, n := range a1Appenders {
			labels = append(labels, seedsLabel(e, map[string]any{"mode": mode, "appenders": n}, "iops"))
		}
		b.Charts = append(b.Charts, lineChart(fmt.Sprintf("%s 4 KiB appends to one file: appends/s", modeName(mode)), "appends/s", xs, "appenders (goroutines, each its own open file)", ss, vals, spans, labels, 590))
	}
	return []chartBlock{b}
}

func chartsZ1(e *Experiment) []chartBlock {
	ss := styled(e)
	keys := []map[string]any{{"bs": z1BS}}
	groups := []string{fmt.Sprintf("%d B into unwritten blocks, QD%d", z1BS, z1Depth)}
	label := func(k map[string]any) string { return seedsLabel(e, k, "iops") }
	iops, labels := barValues(e, ss, keys, "iops", 1, label)
	cpu, _ := barValues(e, ss, keys, "cpu_ns_per_io", 1e-3, nil)
	return []chartBlock{{Legend: legend(ss),
		Note: fmt.Sprintf("Blue label: engine concurrent / seeds (the goal: at least %.0fx). Peers' CPU is fio's jobs' (usr_cpu + sys_cpu), the engine's the whole bench process's.", z1Goal),
		Charts: []*svgChart{
			barChart("IOPS", "IOPS", groups, ss, iops, labels, false, 590),
			barChart("CPU time per write (getrusage user+system)", "us per write", groups, ss, cpu, nil, false, 590),
		}}}
}
