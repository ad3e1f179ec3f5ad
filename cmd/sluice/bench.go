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

	"github.com/sluicefs/sluice/bench"
)

func init() {
	register(&command{
		name:    "bench",
		usage:   "[--quick] [--only W1,W3] [--volume DIR] [--target DIR ...] [--kernel-peers] [--json FILE] [--html FILE] [--duration D]",
		summary: "reproduce the seed experiments",
		run:     runBench,
	})
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// benchStderr is where progress goes (a variable for tests).
var benchStderr io.Writer = os.Stderr

// runBench runs bench.Run with the flags' configuration, prints the text
// tables to stdout and writes the JSON and HTML reports. Without --volume
// the volumes live in a temporary directory in the current directory (so
// on the current disk), removed at the end.
func runBench(args []string, stdout io.Writer) error {
	fs := newFlags("bench")
	quick := fs.Bool("quick", false, "a run of under a minute: small files, short cells, one repetition")
	smoke := fs.Bool("smoke", false, "every cell for a few tens of milliseconds on tiny files (checks the output, measures nothing)")
	only := fs.String("only", "", "run only these experiments (W1,W2,W3,W4,W5)")
	vol := fs.String("volume", "", "keep volumes and prepared files in DIR for reuse, or use the sluice volume DIR for W1-W4")
	var targets stringList
	fs.Var(&targets, "target", "also run the workloads through system calls in DIR (repeatable)")
	kernelPeers := fs.Bool("kernel-peers", false, "also run on XFS and ext4 on loop devices over files on the same disk (root)")
	jsonOut := fs.String("json", "", "write the full report as JSON to FILE (- for stdout)")
	htmlOut := fs.String("html", "", "write a self-contained HTML page with charts to FILE")
	dur := fs.Duration("duration", 0, "measured time of each cell (default: 1s, --quick 250ms)")
	warm := fs.Duration("warmup", -1, "warm-up before each warm cell (default: 300ms, --quick 100ms)")
	reps := fs.Int("reps", 0, "repetitions of each engine cell, median reported (default: 3, --quick 1)")
	fio := fs.String("fio", "", `fio binary for the peers (default: fio in PATH; "none": the built-in Go runner)`)
	noRaw := fs.Bool("no-raw", false, "skip the raw image file peer (the physical limit)")
	from := fs.String("from", "", "measure nothing: read a report written with --json and print or write it again")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return &usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
	}
	if *quick && *smoke {
		return &usageError{"--quick and --smoke exclude each other"}
	}
	cfg := bench.Config{Sizing: bench.Full, Volume: *vol, Targets: targets, KernelPeers: *kernelPeers,
		Fio: *fio, NoRaw: *noRaw, Command: "sluice bench " + strings.Join(args, " ")}
	switch {
	case *quick:
		cfg.Sizing = bench.Quick
	case *smoke:
		cfg.Sizing = bench.Smoke
	}
	if *dur < 0 {
		return &usageError{"--duration must be positive"}
	}
	if *dur > 0 {
		cfg.Sizing.Cell = *dur
	}
	if *warm >= 0 {
		cfg.Sizing.Warmup = *warm
	}
	if *reps < 0 {
		return &usageError{"--reps must be positive"}
	}
	if *reps > 0 {
		cfg.Sizing.Reps, cfg.Sizing.W5Reps = *reps, *reps
	}
	if *only != "" {
		if cfg.Only, err = bench.ParseOnly(*only); err != nil {
			return &usageError{err.Error()}
		}
	}
	// Open the output files first: a typo should not cost a whole run.
	var jsonW, htmlW io.WriteCloser
	text := stdout
	if *jsonOut == "-" {
		jsonW, text = nopCloser{stdout}, benchStderr
	} else if *jsonOut != "" {
		if jsonW, err = os.Create(*jsonOut); err != nil {
			return err
		}
		defer jsonW.Close()
	}
	if *htmlOut != "" {
		if htmlW, err = os.Create(*htmlOut); err != nil {
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
	if *from != "" {
		rep, runErr = readReport(*from)
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
			return fmt.Errorf("writing %s: %w", *jsonOut, err)
		}
	}
	if htmlW != nil {
		if err := rep.WriteHTML(htmlW); err != nil {
			return fmt.Errorf("writing %s: %w", *htmlOut, err)
		}
	}
	if runErr != nil {
		return runErr
	}
	if *from == "" {
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
