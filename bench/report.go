package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
)

// Report is everything a run measured, with what is needed to trace each
// number back: the environment, and for each row the Options string or
// the command line it ran. Its JSON form is what `sluice bench --json`
// writes.
type Report struct {
	Env         Env          `json:"env"`
	Experiments []Experiment `json:"experiments"`
}

// Env describes the machine and the run.
type Env struct {
	// Command is the command line of the run.
	Command string `json:"command"`
	// Started is when the run began (RFC 3339), WallSeconds how long it
	// took, set-up and clean-up included.
	Started     string  `json:"started"`
	WallSeconds float64 `json:"wall_seconds"`
	// Sizing names the sizing; the fields below are its values.
	Sizing        string  `json:"sizing"`
	DataBytes     int64   `json:"data_bytes"`
	W5Bytes       int64   `json:"w5_bytes"`
	A1Bytes       int64   `json:"a1_bytes"`
	Z1Bytes       int64   `json:"z1_bytes"`
	CellSeconds   float64 `json:"cell_seconds"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	Reps          int     `json:"reps"`
	W5Reps        int     `json:"w5_reps"`
	PeerReps      int     `json:"peer_reps"`

	// LoadAvgStart and LoadAvgEnd are /proc/loadavg at the start and the
	// end; MachineBusyPct is the share of all CPUs' time not idle over
	// the run (everyone's, not only this run's): the noise to expect.
	// OthersBusyPct is the part of that not spent by this run (its own
	// process and fio, by getrusage): other work on the machine.
	LoadAvgStart   string  `json:"load_avg_start"`
	LoadAvgEnd     string  `json:"load_avg_end"`
	MachineBusyPct float64 `json:"machine_busy_pct"`
	OthersBusyPct  float64 `json:"others_busy_pct"`

	Hostname    string `json:"hostname"`
	Kernel      string `json:"kernel"`
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model"`
	MemoryBytes int64  `json:"memory_bytes"`
	// Device is the disk under the work directory.
	Device DeviceInfo `json:"device"`
	// WorkDir holds the volumes and images; TempWorkDir says whether the
	// run made it and removed it.
	WorkDir     string `json:"work_dir"`
	TempWorkDir bool   `json:"temp_work_dir"`

	SluiceVersion string `json:"sluice_version"`
	GoVersion     string `json:"go_version"`
	// Fio is fio's path and version, or "" when the Go runner ran the
	// peers.
	Fio  string `json:"fio"`
	Root bool   `json:"root"`
	// ColdMethod says how peers' caches were dropped before cold cells;
	// the engine's cold cells open the volume afresh (its data device is
	// O_DIRECT, so the host page cache is not involved).
	ColdMethod string `json:"cold_method"`
	// Options maps each engine policy label to the Options.String() of
	// the file system it ran on, and Device to the data device's options.
	Options map[string]string `json:"options"`
	// Volumes are the engine volumes used.
	Volumes []VolumeInfo `json:"volumes"`
	// Peers are the peer targets.
	Peers []PeerInfo `json:"peers"`
	// Notes say what could not be done as asked, and why.
	Notes []string `json:"notes"`
}

// DeviceInfo describes a block device.
type DeviceInfo struct {
	Name          string `json:"name"`
	Model         string `json:"model"`
	SizeBytes     int64  `json:"size_bytes"`
	Rotational    bool   `json:"rotational"`
	LogicalBlock  int    `json:"logical_block"`
	Scheduler     string `json:"scheduler"`
	FileSystem    string `json:"file_system"`
	MountPoint    string `json:"mount_point"`
	MountSource   string `json:"mount_source"`
	MountFSType   string `json:"mount_fstype"`
	MountOptions  string `json:"mount_options"`
	DeviceNumbers string `json:"device_numbers"`
}

// VolumeInfo describes an engine volume.
type VolumeInfo struct {
	Role      string `json:"role"`
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
	BlockSize int    `json:"block_size"`
	IOUnit    int    `json:"io_unit"`
	// File is the benchmark file in it, and FileBytes its size.
	File      string `json:"file"`
	FileBytes int64  `json:"file_bytes"`
	// Device is the data device's directdev.Options.String().
	Device string `json:"device"`
}

// PeerInfo describes a peer target.
type PeerInfo struct {
	Label  string `json:"label"`
	Dir    string `json:"dir"`
	FSType string `json:"fstype"`
	// Setup is how it was made (the mkfs and losetup command lines for
	// kernel peers).
	Setup  string `json:"setup,omitempty"`
	Runner string `json:"runner"`
	// Device is the block device under it ("" for none, e.g. FUSE).
	Device string `json:"device,omitempty"`
}

// Experiment is one seed's experiment: its rows, and the seed's own
// numbers to compare with; or one beyond the seeds (A1, Z1), with the
// goal its issue set instead.
type Experiment struct {
	ID string `json:"id"`
	// Seed is the seed's number, "" for A1 and Z1.
	Seed  string `json:"seed"`
	Title string `json:"title"`
	// Workload describes exactly what ran.
	Workload string `json:"workload"`
	// SeedNumbers is the seed's own measurement, as the caption of the
	// table ("" for A1 and Z1).
	SeedNumbers string `json:"seed_numbers"`
	// Goal is what the issue asks of an experiment beyond the seeds ("").
	Goal string `json:"goal,omitempty"`
	// Notes qualify the numbers (how cold, which runner, ...).
	Notes []string `json:"notes,omitempty"`
	Rows  []Row    `json:"rows"`
}

// Row is one cell of an experiment for one target and policy: the median
// of its repetitions.
type Row struct {
	// Target is "engine", "fio:raw" (or "go:raw" with the Go runner),
	// "kernel:xfs", "kernel:ext4", or a --target directory.
	Target string `json:"target"`
	// Policy is the engine's policy label ("classic", "concurrent", or a
	// single toggle) or "kernel" for peers.
	Policy string `json:"policy"`
	// Params are the cell's parameters (bs, threads, depth, ...) and how
	// it ran: "options" (engine: Options.String()), "cmdline" (fio), "workload".
	Params map[string]any `json:"params"`
	// Metrics are medians over the repetitions. Which are present depends
	// on the experiment (see the package documentation).
	Metrics map[string]float64 `json:"metrics"`
	// Samples hold every repetition's value of the main metrics.
	Samples map[string][]float64 `json:"samples,omitempty"`
	// Error is set when the cell could not run; Metrics is then empty.
	Error string `json:"error,omitempty"`
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads a report written by WriteJSON.
func ReadJSON(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Experiment returns the experiment with id, or nil.
func (r *Report) Experiment(id string) *Experiment {
	for i := range r.Experiments {
		if r.Experiments[i].ID == id {
			return &r.Experiments[i]
		}
	}
	return nil
}

// Find returns the row of target and policy whose params match every
// key of match (compared as printed, so that a report read back from JSON
// matches too), or nil.
func (e *Experiment) Find(target, policy string, match map[string]any) *Row {
	for i := range e.Rows {
		r := &e.Rows[i]
		if r.Target != target || r.Policy != policy {
			continue
		}
		ok := true
		for k, v := range match {
			if fmt.Sprint(r.Params[k]) != fmt.Sprint(v) {
				ok = false
				break
			}
		}
		if ok {
			return r
		}
	}
	return nil
}

// Metric returns the row's metric m, and whether it is there. A nil row
// has none.
func (r *Row) Metric(m string) (float64, bool) {
	if r == nil || r.Error != "" {
		return 0, false
	}
	v, ok := r.Metrics[m]
	return v, ok
}

// series is a (target, policy) pair: one line or bar colour, one column.
type series struct{ Target, Policy string }

// Series lists the experiment's (target, policy) pairs in a stable order:
// engine classic first, then the engine's other policies, then peers in
// the order they appear.
func (e *Experiment) series() []series {
	var out []series
	for _, r := range e.Rows {
		s := series{r.Target, r.Policy}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	rank := func(s series) int {
		if s.Target != TargetEngine {
			return 10
		}
		switch s.Policy {
		case PolicyClassic:
			return 0
		case PolicyConcurrent:
			return 2
		}
		return 1
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

// label is the series' column heading.
func (s series) label() string {
	if s.Target == TargetEngine {
		return policyLabel(s.Policy)
	}
	return s.Target
}

// policyLabel shortens a policy for a column heading.
func policyLabel(p string) string {
	if i := strings.Index(p, "-"); i > 0 && strings.HasPrefix(p, PolicyConcurrent) {
		return "concurrent w/o " + toggleSeed(p[i+1:])
	}
	if i := strings.Index(p, "+"); i > 0 && strings.HasPrefix(p, PolicyClassic) {
		return "classic + " + toggleSeed(p[i+1:])
	}
	return p
}

// toggleSeed names a Policy field by its seed ("OptimisticUnalignedWrites"
// -> "000").
func toggleSeed(field string) string {
	switch field {
	case "SharedDirectReads":
		return "001"
	case "OptimisticUnalignedWrites":
		return "000"
	case "ParallelDirectWrites":
		return "002"
	case "AsyncBufferedReads":
		return "003"
	case "SkipFullPageRMW":
		return "004"
	}
	return field
}

// median returns the median of xs (the mean of the middle two for an even
// count), NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rowAcc accumulates the repetitions of one row.
type rowAcc struct {
	row     Row
	samples map[string][]float64
	order   []string
}

// add records one repetition's metrics.
func (a *rowAcc) add(m map[string]float64) {
	if a.samples == nil {
		a.samples = map[string][]float64{}
	}
	for k, v := range m {
		if _, ok := a.samples[k]; !ok {
			a.order = append(a.order, k)
		}
		a.samples[k] = append(a.samples[k], v)
	}
}

// final returns the row with medians, keeping the samples of the main
// metrics.
func (a *rowAcc) final() Row {
	r := a.row
	if r.Error != "" {
		r.Metrics = map[string]float64{}
		return r
	}
	r.Metrics = map[string]float64{}
	for k, xs := range a.samples {
		m := median(xs)
		if math.IsNaN(m) || math.IsInf(m, 0) {
			continue // JSON has no NaN; a metric with no value is absent
		}
		r.Metrics[k] = m
		if len(xs) > 1 && mainMetrics[k] {
			if r.Samples == nil {
				r.Samples = map[string][]float64{}
			}
			r.Samples[k] = xs
		}
	}
	return r
}

// mainMetrics keep their samples in the report.
var mainMetrics = map[string]bool{"iops": true, "mib_s": true, "cpu_ns_per_io": true}
