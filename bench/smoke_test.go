package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicefs/sluice/device/directdev"
	"github.com/sluicefs/sluice/internal/harness/fio"
)

// The smoke test runs the whole suite, every cell of the full grid, and
// checks that the report is complete and well formed: the JSON (read
// back generically, as a CI script would), the text tables and the HTML
// page. It never checks speed.
//
// Sizing: Smoke by default (every cell for 40 ms on 16 MiB files; about
// 40 s, most of it fio's start-up, and about the same under -race, since
// cells are time-bound), or Quick with SLUICE_BENCH_SMOKE=quick (what
// `sluice bench --quick --json` runs; about a minute and a half without
// -race, A1 and Z1 about 25 s of it).
// The volumes go in SLUICE_BENCH_DIR, or t.TempDir(): it must be on a
// file system that takes O_DIRECT (not tmpfs).

func smokeSizing(t *testing.T) Sizing {
	switch v := os.Getenv("SLUICE_BENCH_SMOKE"); v {
	case "", "smoke":
		return Smoke
	case "quick":
		return Quick
	default:
		t.Fatalf("SLUICE_BENCH_SMOKE=%q: use smoke or quick", v)
	}
	return Sizing{}
}

func smokeDir(t *testing.T) string {
	if d := os.Getenv("SLUICE_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "smoke-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return t.TempDir()
}

func runSmoke(t *testing.T, cfg Config) *Report {
	t.Helper()
	parent := smokeDir(t)
	cfg.WorkParent = parent
	var progress bytes.Buffer
	cfg.Progress = &progress
	rep, err := Run(context.Background(), cfg)
	if errors.Is(err, directdev.ErrNoDirectIO) {
		t.Skipf("%s does not take O_DIRECT: set SLUICE_BENCH_DIR to a directory on a disk: %v", parent, err)
	}
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	// The temporary work directory is gone.
	if ents, err := os.ReadDir(parent); err != nil || len(ents) != 0 {
		t.Errorf("work directory left behind in %s: %v %v", parent, ents, err)
	}
	if !strings.Contains(progress.String(), "ETA") {
		t.Errorf("no progress lines:\n%s", progress.String())
	}
	return rep
}

func TestSmokeReport(t *testing.T) {
	sz := smokeSizing(t)
	cfg := Config{Sizing: sz, Fio: "none", Command: "smoke test"}
	if fio.Available() {
		cfg.Fio = "" // fio in PATH
	}
	rep := runSmoke(t, cfg)
	checkReport(t, rep, sz, fio.Available())
}

// TestSmokeGoRunner runs the peers through the Go runner (the fallback
// without fio) on two experiments.
func TestSmokeGoRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	sz := Smoke
	rep := runSmoke(t, Config{Sizing: sz, Fio: "none", Only: []string{"W2", "W5", "Z1"}})
	if rep.Env.Fio != "" {
		t.Errorf("env.fio = %q with --fio none", rep.Env.Fio)
	}
	js := reportJSON(t, rep)
	exps := js["experiments"].([]any)
	if len(exps) != 3 {
		t.Fatalf("%d experiments, want W2, W5 and Z1", len(exps))
	}
	for _, e := range exps {
		for _, r := range e.(map[string]any)["rows"].([]any) {
			row := r.(map[string]any)
			if row["target"] == "go:raw" && !strings.HasPrefix(fmt.Sprint(row["params"].(map[string]any)["cmdline"]), "go-runner ") {
				t.Errorf("go:raw row without the Go runner's description: %v", row["params"])
			}
			if s, _ := row["error"].(string); s != "" {
				t.Errorf("%v %v %v: error %s", e.(map[string]any)["id"], row["target"], row["policy"], s)
			}
		}
	}
}

// reportJSON writes rep as JSON and reads it back as generic values.
func reportJSON(t *testing.T, rep *Report) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	var js map[string]any
	if err := json.Unmarshal(buf.Bytes(), &js); err != nil {
		t.Fatalf("the JSON does not parse: %v", err)
	}
	return js
}

// checkReport checks that the JSON has every experiment, every cell of
// its grid for the engine and the raw peer, the metrics each experiment
// promises, and what each number needs to be traced back; and that the
// text and HTML renderings are complete.
func checkReport(t *testing.T, rep *Report, sz Sizing, fio bool) {
	js := reportJSON(t, rep)
	env, ok := js["env"].(map[string]any)
	if !ok {
		t.Fatalf("no env object")
	}
	for _, k := range []string{"kernel", "cpu_model", "sluice_version", "go_version", "started", "command", "cold_method", "work_dir", "load_avg_start"} {
		if s, _ := env[k].(string); s == "" {
			t.Errorf("env.%s is empty", k)
		}
	}
	for _, k := range []string{"cpus", "wall_seconds", "cell_seconds", "data_bytes", "reps"} {
		if v, _ := env[k].(float64); v <= 0 {
			t.Errorf("env.%s = %v", k, env[k])
		}
	}
	if env["sizing"] != sz.Name {
		t.Errorf("env.sizing = %v, want %s", env["sizing"], sz.Name)
	}
	if fio && !strings.Contains(fmt.Sprint(env["fio"]), "fio") {
		t.Errorf("env.fio = %v, want fio's path and version", env["fio"])
	}
	opts, _ := env["options"].(map[string]any)
	for _, p := range []string{"classic", "seeds", "concurrent"} {
		if s := fmt.Sprint(opts[p]); !strings.Contains(s, "policy="+p) {
			t.Errorf("env.options[%s] = %q, not an Options.String()", p, s)
		}
	}
	if d, _ := env["device"].(map[string]any); d == nil || d["mount_point"] == "" {
		t.Errorf("env.device = %v", env["device"])
	}

	raw := "go:raw"
	if fio {
		raw = "fio:raw"
	}
	type cell struct {
		target, policy string
		params         map[string]any
	}
	// The grid each experiment must cover, and the metrics each of its
	// rows must have.
	var want = map[string]struct {
		seed    string
		cells   []cell
		metrics map[string][]string // by target kind: "engine", "peer"
	}{}
	add := func(id, seed string, cells []cell, engineM, peerM []string) {
		want[id] = struct {
			seed    string
			cells   []cell
			metrics map[string][]string
		}{seed, cells, map[string][]string{"engine": engineM, "peer": peerM}}
	}
	var c1, c2, c3, c4, c5, ca, cz []cell
	for _, bs := range w1BS {
		for _, n := range w1Threads {
			p := map[string]any{"bs": bs, "threads": n}
			c1 = append(c1, cell{"engine", "classic", p}, cell{"engine", "concurrent", p}, cell{raw, "kernel", p})
		}
	}
	for _, bs := range w2BS {
		p := map[string]any{"bs": bs}
		for _, pol := range w2Policies {
			c2 = append(c2, cell{"engine", pol.label, p})
		}
		c2 = append(c2, cell{raw, "kernel", p})
	}
	for _, l := range w3Layouts {
		p := map[string]any{"rings": l}
		c3 = append(c3, cell{"engine", "classic", p}, cell{"engine", "concurrent", p})
	}
	c3 = append(c3, cell{raw, "kernel", map[string]any{"rings": "per-submitter"}})
	for _, d := range w4Depths {
		p := map[string]any{"depth": d}
		c4 = append(c4, cell{"engine", "classic", p}, cell{"engine", "concurrent", p}, cell{raw, "kernel", p})
	}
	for _, sync := range w5Syncs {
		for _, bs := range w5BS {
			for _, u := range []int{4096, 65536} {
				p := map[string]any{"bs": bs, "sync": sync, "io_unit": u}
				c5 = append(c5, cell{"engine", "classic", p}, cell{"engine", "concurrent", p})
			}
			c5 = append(c5, cell{raw, "kernel", map[string]any{"bs": bs, "sync": sync}})
		}
	}
	// A1's peers always run through the Go runner (fio has no O_APPEND).
	for _, mode := range a1Modes {
		for _, n := range a1Appenders {
			p := map[string]any{"mode": mode, "appenders": n}
			for _, pol := range a1Policies {
				ca = append(ca, cell{"engine", pol.label, p})
			}
			ca = append(ca, cell{"go:raw", "kernel", p})
		}
	}
	for _, pol := range z1Policies {
		cz = append(cz, cell{"engine", pol.label, map[string]any{"bs": z1BS}})
	}
	cz = append(cz, cell{raw, "kernel", map[string]any{"bs": z1BS}})
	cpu := "cpu_ns_per_io"
	add("W1", "001", c1, []string{"iops", "mib_s", cpu, "excl_lock_frac"}, []string{"iops", "mib_s", cpu})
	add("W2", "000", c2, []string{"iops", "read_iops", "write_iops", "mib_s", "read_mib_s", "write_mib_s", cpu}, []string{"iops", "read_iops", "write_iops", "mib_s", "read_mib_s", "write_mib_s"})
	add("W3", "002", c3, []string{"iops", cpu, "blocked_workers_max", "hashed_waits_per_io"}, []string{"iops", cpu})
	add("W4", "003", c4, []string{"iops", cpu, "goroutines_max", "blocked_workers_max", "cache_hit_pct"}, []string{"iops", cpu})
	add("W5", "004", c5, []string{"mib_s", "device_reads", "cache_reads", "rmw_unit_reads"}, []string{"mib_s"})
	add("A1", "", ca, []string{"iops", "mib_s", cpu, "excl_lock_frac", "records"}, []string{"iops", "mib_s", cpu})
	add("Z1", "", cz, []string{"iops", "mib_s", cpu, "excl_lock_frac", "drains_per_io", "max_in_flight", "converted_frac"}, []string{"iops", "mib_s"})

	exps, _ := js["experiments"].([]any)
	if len(exps) != len(AllExperiments) {
		t.Fatalf("%d experiments, want %d", len(exps), len(AllExperiments))
	}
	for i, x := range exps {
		e := x.(map[string]any)
		id := AllExperiments[i]
		if e["id"] != id {
			t.Errorf("experiment %d is %v, want %s", i, e["id"], id)
			continue
		}
		w := want[id]
		if e["seed"] != w.seed {
			t.Errorf("%s: seed %v, want %s", id, e["seed"], w.seed)
		}
		text := []string{"title", "workload", "seed_numbers"}
		if w.seed == "" {
			text[2] = "goal"
		}
		for _, k := range text {
			if s, _ := e[k].(string); s == "" {
				t.Errorf("%s: %s is empty", id, k)
			}
		}
		rows, _ := e["rows"].([]any)
		if len(rows) != len(w.cells) {
			t.Errorf("%s: %d rows, want %d", id, len(rows), len(w.cells))
		}
		for _, c := range w.cells {
			row := findJSONRow(rows, c.target, c.policy, c.params)
			if row == nil {
				t.Errorf("%s: no row for %s %s %v", id, c.target, c.policy, c.params)
				continue
			}
			if s, _ := row["error"].(string); s != "" {
				t.Errorf("%s %s %s %v: error %s", id, c.target, c.policy, c.params, s)
				continue
			}
			params := row["params"].(map[string]any)
			kind := "peer"
			if c.target == "engine" {
				kind = "engine"
				if s := fmt.Sprint(params["options"]); !strings.Contains(s, "policy=") {
					t.Errorf("%s %s %v: params.options %q is not an Options string", id, c.policy, c.params, s)
				}
			} else if s := fmt.Sprint(params["cmdline"]); s == "" || s == "<nil>" {
				t.Errorf("%s %s %v: no params.cmdline", id, c.target, c.params)
			}
			metrics, _ := row["metrics"].(map[string]any)
			if id == "A1" && kind == "engine" && params["mode"] == "direct" {
				if v, _ := metrics["max_in_flight"].(float64); v < 1 {
					t.Errorf("A1 %s %v: max_in_flight = %v", c.policy, c.params, metrics["max_in_flight"])
				}
			}
			for _, m := range w.metrics[kind] {
				v, ok := metrics[m].(float64)
				if !ok || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Errorf("%s %s %s %v: metric %s = %v", id, c.target, c.policy, c.params, m, metrics[m])
				}
			}
			// Throughput is positive (except that a 0 can happen for
			// nothing but a failed cell, which is an error above).
			for _, m := range []string{"iops", "mib_s"} {
				if v, ok := metrics[m].(float64); ok && v <= 0 && slicesContains(w.metrics[kind], m) {
					t.Errorf("%s %s %s %v: %s = %v", id, c.target, c.policy, c.params, m, v)
				}
			}
		}
	}

	// The text report has every experiment's tables and the headlines.
	var text bytes.Buffer
	rep.WriteText(&text)
	for _, s := range []string{"=== W1", "=== W2", "=== W3", "=== W4", "=== W5", "=== A1 (beyond the seeds)", "=== Z1 (beyond the seeds)", "Headline ratios", "IOPS, engine classic:", "concurrent / classic:",
		"seed 001 after / before", "MiB/s (fsync at the end included):", "Seed 004 (", "Appends/s, O_DIRECT|O_APPEND", "Appends/s, buffered|O_APPEND",
		"concurrent/seeds (goal >= 3x at 8+)", "concurrent/seeds (goal >= 3x)", "Goal: Issue 16", "(goal, at least)"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text report lacks %q", s)
		}
	}
	if strings.Contains(text.String(), "NaN") || strings.Contains(text.String(), "err ") {
		t.Errorf("text report has NaN or errors:\n%s", text.String())
	}
	// The page is self-contained and has the charts.
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	hs := page.String()
	if n, m := strings.Count(hs, "<svg"), strings.Count(hs, "</svg>"); n < 16 || n != m {
		t.Errorf("HTML has %d <svg and %d </svg>, want at least 16 charts", n, m)
	}
	for _, s := range []string{"<!DOCTYPE html>", "</html>", "W5 (seed 004)", "A1 (beyond the seeds)", "Z1 (beyond the seeds)", "The goal.", "Options.String(), classic", "Options.String(), seeds", "Headline ratios"} {
		if !strings.Contains(hs, s) {
			t.Errorf("HTML lacks %q", s)
		}
	}
	for _, s := range []string{"NaN", "Inf", "<script", "http://", "https://"} {
		if strings.Contains(strings.ReplaceAll(hs, "http://www.w3.org/2000/svg", ""), s) {
			t.Errorf("HTML contains %q", s)
		}
	}
	if t.Failed() {
		os.WriteFile(filepath.Join(os.TempDir(), "sluice-bench-smoke-failed.txt"), text.Bytes(), 0o644)
	}
}

func slicesContains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// findJSONRow finds a row of a generic JSON report.
func findJSONRow(rows []any, target, policy string, params map[string]any) map[string]any {
	for _, x := range rows {
		r := x.(map[string]any)
		if r["target"] != target || r["policy"] != policy {
			continue
		}
		p, _ := r["params"].(map[string]any)
		ok := true
		for k, v := range params {
			if fmt.Sprint(p[k]) != fmt.Sprint(v) {
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
