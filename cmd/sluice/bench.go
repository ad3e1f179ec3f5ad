package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/bench"
)

// newBenchCommand returns the bench command; args is its command line
// after "bench", recorded in the report.
func newBenchCommand(args []string) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [--quick] [--only W1,W3] [--volume DIR] [--target DIR ...] [--kernel-peers] [--json FILE] [--html FILE] [--duration D]",
		Short: "reproduce the seed experiments",
		Long: `Reproduce each seed's experiment (W1-W5) with the optimisation off and on, and
the two beyond the seeds (A1 appends, Z1 sub-block writes into a fresh file) under
classic, seeds and concurrent, next to the raw device and, with --target or
--kernel-peers, other file systems. The
text tables go to stdout, progress to stderr. Without --volume the volumes live in
a temporary directory in the current directory (so on the current disk), removed
at the end. A full run takes several minutes; --quick about a minute and a half.`,
		Example: `  sluice bench --quick
  sluice bench --only W1,W3 --json report.json --html report.html
  sluice bench --quick --only A1,Z1 --kernel-peers
  sluice bench --kernel-peers --json report.json
  sluice bench --from report.json --html report.html`,
		Args: func(_ *cobra.Command, pos []string) error {
			if len(pos) != 0 {
				return &usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.warmupSet = cmd.Flags().Changed("warmup")
			return runBench(&f, args, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.quick, "quick", false, "a short run (about a minute and a half): small files, short cells, one repetition")
	fl.BoolVar(&f.smoke, "smoke", false, "every cell for a few tens of milliseconds on tiny files (checks the output, measures nothing)")
	fl.StringVar(&f.only, "only", "", "run only these experiments, comma-separated (`W1,W3`; of W1, W2, W3, W4, W5, A1, Z1)")
	fl.StringVar(&f.volume, "volume", "", "keep volumes and prepared files in `DIR` for reuse, or use the sluice volume DIR for W1-W4")
	fl.StringArrayVar(&f.targets, "target", nil, "also run the workloads through system calls in `DIR` (repeatable)")
	fl.BoolVar(&f.kernelPeers, "kernel-peers", false, "also run on XFS and ext4 on loop devices over files on the same disk (root)")
	fl.StringVar(&f.json, "json", "", "write the full report as JSON to `FILE` (- for stdout)")
	fl.StringVar(&f.html, "html", "", "write a self-contained HTML page with charts to `FILE`")
	fl.DurationVar(&f.duration, "duration", 0, "measured time (`DURATION`) of each cell (default: 1s, --quick 250ms)")
	fl.DurationVar(&f.warmup, "warmup", 0, "warm-up (`DURATION`) before each warm cell (default: 300ms, --quick 100ms)")
	fl.IntVar(&f.reps, "reps", 0, "`N` repetitions of each engine cell, median reported (default: 3, --quick 1)")
	fl.StringVar(&f.fio, "fio", "", "the fio binary (`PATH`) for the peers (default: fio in PATH; \"none\": the built-in Go runner)")
	fl.BoolVar(&f.noRaw, "no-raw", false, "skip the raw image file peer (the physical limit)")
	fl.StringVar(&f.from, "from", "", "measure nothing: read a report written with --json from `FILE` and print or write it again")
	cmd.RegisterFlagCompletionFunc("only", completeWords("W1", "W2", "W3", "W4", "W5", "A1", "Z1"))
	return cmd
}

// benchFlags are the flags of bench.
type benchFlags struct {
	quick, smoke, kernelPeers, noRaw bool
	only, volume, json, html, fio    string
	from                             string
	targets                          []string
	duration, warmup                 time.Duration
	warmupSet                        bool // --warmup was given
	reps                             int
}

// benchStderr is where progress goes (a variable for tests).
var benchStderr io.Writer = os.Stderr

// runBench runs bench.Run with the flags' configuration, prints the text
// tables to stdout and writes the JSON and HTML reports. Without --volume
// the volumes live in a temporary directory in the current directory (so
// on the current disk), removed at the end.
func runBench(f *benchFlags, args []string, stdout io.Writer) error {
	if f.quick && f.smoke {
		return &usageError{"--quick and --smoke exclude each other"}
	}
	cfg := bench.Config{Sizing: bench.Full, Volume: f.volume, Targets: f.targets, KernelPeers: f.kernelPeers,
		Fio: f.fio, NoRaw: f.noRaw, Command: "sluice bench " + strings.Join(args, " ")}
	switch {
	case f.quick:
		cfg.Sizing = bench.Quick
	case f.smoke:
		cfg.Sizing = bench.Smoke
	}
	if f.duration < 0 {
		return &usageError{"--duration must be positive"}
	}
	if f.duration > 0 {
		cfg.Sizing.Cell = f.duration
	}
	// A negative --warmup leaves the default, as it always has.
	if f.warmupSet && f.warmup >= 0 {
		cfg.Sizing.Warmup = f.warmup
	}
	if f.reps < 0 {
		return &usageError{"--reps must be positive"}
	}
	if f.reps > 0 {
		cfg.Sizing.Reps, cfg.Sizing.W5Reps = f.reps, f.reps
	}
	var err error
	if f.only != "" {
		if cfg.Only, err = bench.ParseOnly(f.only); err != nil {
			return &usageError{err.Error()}
		}
	}
	// Open the output files first: a typo should not cost a whole run.
	var jsonW, htmlW io.WriteCloser
	text := stdout
	if f.json == "-" {
		jsonW, text = nopCloser{stdout}, benchStderr
	} else if f.json != "" {
		if jsonW, err = os.Create(f.json); err != nil {
			return err
		}
		defer jsonW.Close()
	}
	if f.html != "" {
		if htmlW, err = os.Create(f.html); err != nil {
			return err
		}
		defer htmlW.Close()
	}
	cfg.Progress = benchStderr
	if f, ok := benchStderr.(*os.File); ok {
		cfg.Live = bench.IsTerminal(f)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	var rep *bench.Report
	var runErr error
	if f.from != "" {
		rep, runErr = readReport(f.from)
	} else {
		rep, runErr = bench.Run(ctx, cfg)
	}
	if rep == nil {
		return runErr
	}
	if len(rep.Experiments) > 0 {
		rep.WriteText(text)
	}
	if jsonW != nil {
		if err := rep.WriteJSON(jsonW); err != nil {
			return fmt.Errorf("writing %s: %w", f.json, err)
		}
	}
	if htmlW != nil {
		if err := rep.WriteHTML(htmlW); err != nil {
			return fmt.Errorf("writing %s: %w", f.html, err)
		}
	}
	if runErr != nil {
		return runErr
	}
	if f.from == "" {
		fmt.Fprintf(benchStderr, "sluice bench: done in %v\n", time.Since(t0).Round(time.Second))
	}
	return nil
}

// readReport reads a --json report back.
func readReport(path string) (*bench.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rep, err := bench.ReadJSON(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return rep, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
