package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Experiment IDs, in the order they run: the seeds' (W1-W5), then the
// two beyond them (A1, Z1).
var AllExperiments = []string{"W1", "W2", "W3", "W4", "W5", "A1", "Z1"}

// Sizing is how big and how long a run is: file sizes, the measured time
// of one cell, the warm-up before it and the repetitions whose median is
// reported.
type Sizing struct {
	// Name is "full", "quick" or "smoke".
	Name string
	// DataBytes is the size of the one file W1-W4 run on (engine, raw
	// image and every target). It is a multiple of 1 MiB.
	DataBytes int64
	// W5Bytes is the size of W5's overwritten file, per volume and
	// target. A W5 cell stops at its end or after Cell, whichever comes
	// first. It is a multiple of 1 MiB.
	W5Bytes int64
	// Cell is the measured time of one cell.
	Cell time.Duration
	// Warmup runs before each warm cell (W1, W2, W3) and is not measured.
	// Cold cells (W4, W5) have none: they start on an empty cache.
	Warmup time.Duration
	// Reps is how many times each engine cell of W1-W4 runs; tables show
	// the median. The repetitions are interleaved (all cells of an
	// experiment, then all again), so that drift in the machine's load
	// hits every configuration alike.
	Reps int
	// W5Reps is the same for W5's engine cells.
	W5Reps int
	// A1Bytes caps the file of one A1 cell: the appenders stop when
	// their records fill it, even before Cell is over. It is a multiple
	// of 1 MiB.
	A1Bytes int64
	// Z1Bytes is the fallocated, never written region of one Z1 cell.
	// Every write of the engine's cell lands in a block not written
	// before, so the cell stops when each block has been written once,
	// even before Cell is over. It is a multiple of 1 MiB.
	Z1Bytes int64
	// PeerReps is the same for every peer cell (fio or the Go runner).
	PeerReps int
}

// The sizings. Full takes about 6 minutes on a 2-core machine with fio
// installed (4 of them W1-W5; more with the machine saturated by other
// work), quick about a minute and a half (W1-W5 under a minute, A1 and Z1
// about 25 s); smoke runs every cell of the full grid
// for a few tens of milliseconds on tiny files, to check the output's
// shape (the -race test uses it).
var (
	Full = Sizing{Name: "full", DataBytes: 1 << 30, W5Bytes: 256 << 20, A1Bytes: 1 << 30, Z1Bytes: 1 << 30,
		Cell: 700 * time.Millisecond, Warmup: 200 * time.Millisecond, Reps: 3, W5Reps: 3, PeerReps: 1}
	Quick = Sizing{Name: "quick", DataBytes: 128 << 20, W5Bytes: 64 << 20, A1Bytes: 256 << 20, Z1Bytes: 256 << 20,
		Cell: 250 * time.Millisecond, Warmup: 50 * time.Millisecond, Reps: 1, W5Reps: 1, PeerReps: 1}
	Smoke = Sizing{Name: "smoke", DataBytes: 16 << 20, W5Bytes: 8 << 20, A1Bytes: 32 << 20, Z1Bytes: 32 << 20,
		Cell: 40 * time.Millisecond, Warmup: 0, Reps: 1, W5Reps: 1, PeerReps: 1}
)

// Config says what a Run measures and where.
type Config struct {
	// Sizing sets file sizes, cell time and repetitions. The default value
	// is Full.
	Sizing Sizing
	// Only lists the experiments to run ("W1", "A1"). The default value
	// (nil) runs all of AllExperiments.
	Only []string
	// Volume is a directory for the run's volumes and images. If it holds
	// a sluice volume (data and meta/), W1-W4 run on that volume, in
	// files under /.sluice-bench that are removed at the end, and the
	// rest goes in a temporary directory beside it. Otherwise the
	// directory is created if needed and kept, with its volumes and
	// prepared files, for the next run to reuse. The default value ("")
	// makes a temporary directory in WorkParent and removes it at the
	// end.
	Volume string
	// WorkParent is where the temporary directory goes when Volume is
	// empty: it should be on the disk being measured. The default value
	// is the current directory.
	WorkParent string
	// Targets are directories to run the same workloads on through system
	// calls (a sluice mount, a kernel file system, ...): each becomes a
	// column. The run creates two files in each and removes them.
	Targets []string
	// KernelPeers creates XFS and ext4 on loop devices (direct I/O) over
	// image files in the work directory, runs the workloads on them and
	// removes them. It needs root. The default value is false.
	KernelPeers bool
	// NoRaw skips the raw image peer (fio on a plain file on the work
	// directory's file system, the physical limit). The default value is
	// false.
	NoRaw bool
	// Fio is the fio binary. The default value is "fio" looked up in
	// PATH; "none" uses the built-in Go runner for every peer.
	Fio string
	// Progress receives progress reports. The default value (nil) is
	// silent.
	Progress io.Writer
	// Live rewrites one progress line in place (for a terminal) instead
	// of printing a line per cell. The default value is false.
	Live bool
	// Command is the command line recorded in the report. The default
	// value is empty.
	Command string
}

// ParseOnly parses a comma-separated list of experiment IDs (case
// insensitive; a bare number means a seed's: "1" is "W1").
func ParseOnly(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToUpper(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if f[0] >= '0' && f[0] <= '9' {
			f = "W" + f
		}
		if !slices.Contains(AllExperiments, f) {
			return nil, fmt.Errorf("unknown experiment %q: use %s", f, strings.Join(AllExperiments, ","))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no experiment named in %q", s)
	}
	return out, nil
}

func (c *Config) wants(id string) bool {
	return len(c.Only) == 0 || slices.Contains(c.Only, id)
}
