package bench

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// syntheticReport returns a report with every experiment's rows, for
// two engine policies (and W2's toggle) and one peer, with made-up
// metrics, and every free-text field set to hostile.
func syntheticReport(hostile string) *Report {
	rng := rand.New(rand.NewPCG(1, 2))
	rep := &Report{Env: Env{
		Command: "sluice bench " + hostile, Started: "2026-01-02T03:04:05Z " + hostile, WallSeconds: 12,
		Sizing: "synthetic " + hostile, DataBytes: 64 << 20, W5Bytes: 32 << 20, CellSeconds: 0.25, Reps: 3, W5Reps: 2, PeerReps: 1,
		LoadAvgStart: "0.1 " + hostile, LoadAvgEnd: "0.2", MachineBusyPct: 80, OthersBusyPct: 50, Kernel: "Linux " + hostile, CPUs: 2, CPUModel: "cpu " + hostile, MemoryBytes: 8 << 30,
		Device:  DeviceInfo{Name: "vda", Model: hostile, MountPoint: "/", MountSource: "/dev/vda", MountFSType: "ext4", MountOptions: "rw," + hostile},
		WorkDir: "/tmp/" + hostile, SluiceVersion: "v0 " + hostile, GoVersion: "go1", Fio: "fio-3 " + hostile, ColdMethod: hostile,
		Options: map[string]string{PolicyClassic: "classic " + hostile, PolicySeeds: "seeds", PolicyConcurrent: "concurrent", "device": "dev " + hostile,
			without("OptimisticUnalignedWrites").label: "w/o 000"},
		Volumes: []VolumeInfo{{Role: "main " + hostile, Path: "/v/" + hostile, SizeBytes: 1 << 30, BlockSize: 4096, IOUnit: 512, File: "/f/" + hostile, FileBytes: 64 << 20}},
		Peers:   []PeerInfo{{Label: "fio:raw", Dir: "/d/" + hostile, FSType: "ext4", Runner: "fio", Device: "vda", Setup: hostile}},
		Notes:   []string{"note " + hostile},
	}}
	m := func(keys ...string) (map[string]float64, map[string][]float64) {
		ms, ss := map[string]float64{}, map[string][]float64{}
		for _, k := range keys {
			v := 1 + rng.Float64()*1000
			ms[k] = v
			ss[k] = []float64{v * 0.9, v, v * 1.1}
		}
		return ms, ss
	}
	row := func(target, policy string, params map[string]any, keys ...string) Row {
		params["cmdline"] = "fio --name=" + hostile
		params["options"] = hostile
		r := Row{Target: target, Policy: policy, Params: params}
		r.Metrics, r.Samples = m(keys...)
		return r
	}
	pols := []string{PolicyClassic, PolicyConcurrent}
	targets := func(pols []string) [][2]string {
		var out [][2]string
		for _, p := range pols {
			out = append(out, [2]string{TargetEngine, p})
		}
		return append(out, [2]string{"fio:raw", PolicyPeer})
	}
	exp := func(id, seed string) Experiment {
		return Experiment{ID: id, Seed: seed, Title: "title " + hostile, Workload: "workload " + hostile,
			SeedNumbers: "seed " + hostile, Notes: []string{"note " + hostile}}
	}
	w1 := exp("W1", "001")
	for _, t := range targets(pols) {
		for _, bs := range w1BS {
			for _, n := range w1Threads {
				w1.Rows = append(w1.Rows, row(t[0], t[1], map[string]any{"bs": bs, "threads": n}, "iops", "mib_s", "cpu_ns_per_io", "excl_lock_frac"))
			}
		}
	}
	w2 := exp("W2", "000")
	var w2pols []string
	for _, p := range w2Policies {
		w2pols = append(w2pols, p.label)
	}
	for _, t := range targets(w2pols) {
		for _, bs := range w2BS {
			w2.Rows = append(w2.Rows, row(t[0], t[1], map[string]any{"bs": bs}, "iops", "read_iops", "write_iops", "mib_s", "cpu_ns_per_io"))
		}
	}
	w3 := exp("W3", "002")
	for _, t := range targets(pols) {
		for _, l := range w3Layouts {
			w3.Rows = append(w3.Rows, row(t[0], t[1], map[string]any{"rings": l}, "iops", "cpu_ns_per_io", "blocked_workers_max", "hashed_waits_per_io"))
		}
	}
	w4 := exp("W4", "003")
	for _, t := range targets(pols) {
		for _, d := range w4Depths {
			w4.Rows = append(w4.Rows, row(t[0], t[1], map[string]any{"depth": d}, "iops", "cpu_ns_per_io", "blocked_workers_max", "goroutines_max", "goroutines_base", "cache_hit_pct"))
		}
	}
	w5 := exp("W5", "004")
	for _, t := range targets(pols) {
		for _, u := range []int{4096, 65536} {
			for _, sync := range w5Syncs {
				for _, bs := range w5BS {
					p := map[string]any{"bs": bs, "sync": sync}
					if t[0] == TargetEngine {
						p["io_unit"] = u
					} else if u != 4096 {
						continue
					}
					w5.Rows = append(w5.Rows, row(t[0], t[1], p, "mib_s", "iops", "device_reads_per_mib", "device_reads", "cpu_ns_per_io"))
				}
			}
		}
	}
	w5.Rows = append(w5.Rows, Row{Target: TargetEngine, Policy: PolicyConcurrent, Params: map[string]any{"bs": 1, "cmdline": hostile}, Error: "failed " + hostile})
	azPols := []string{PolicyClassic, PolicySeeds, PolicyConcurrent}
	a1 := exp("A1", "")
	a1.SeedNumbers, a1.Goal = "", "goal "+hostile
	for _, t := range targets(azPols) {
		for _, mode := range a1Modes {
			for _, n := range a1Appenders {
				a1.Rows = append(a1.Rows, row(t[0], t[1], map[string]any{"mode": mode, "appenders": n}, "iops", "mib_s", "cpu_ns_per_io", "excl_lock_frac", "max_in_flight"))
			}
		}
	}
	z1 := exp("Z1", "")
	z1.SeedNumbers, z1.Goal = "", "goal "+hostile
	for _, t := range targets(azPols) {
		z1.Rows = append(z1.Rows, row(t[0], t[1], map[string]any{"bs": z1BS}, "iops", "mib_s", "cpu_ns_per_io", "excl_lock_frac", "drains_per_io", "converted_frac"))
	}
	rep.Experiments = []Experiment{w1, w2, w3, w4, w5, a1, z1}
	return rep
}

// TestHTMLEscapes renders a report whose every free-text field holds
// markup and checks that none of it reaches the page as markup.
func TestHTMLEscapes(t *testing.T) {
	const hostile = `<script>alert(1)</script><img src=x onerror="alert(2)">'&"</title></svg>`
	var page bytes.Buffer
	if err := syntheticReport(hostile).WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	hs := page.String()
	if path := os.Getenv("SLUICE_BENCH_HTML_OUT"); path != "" {
		os.WriteFile(path, page.Bytes(), 0o644)
	}
	for _, s := range []string{"<script", "<img", "onerror=\"", "alert(1)</script>"} {
		if strings.Contains(hs, s) {
			t.Errorf("HTML contains %q unescaped", s)
		}
	}
	if !strings.Contains(hs, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("HTML lacks the escaped hostile string")
	}
	// The markup around it is intact: every experiment with its charts,
	// tables and failed cells, and the page closed.
	if n, m := strings.Count(hs, "<svg"), strings.Count(hs, "</svg>"); n != 18 || n != m {
		t.Errorf("HTML has %d <svg and %d </svg>, want 18", n, m)
	}
	if n, m := strings.Count(hs, "<title>"), strings.Count(hs, "</title>"); n != m || n < 100 {
		t.Errorf("HTML has %d <title> and %d </title>", n, m)
	}
	for _, id := range []string{"env", "headlines", "W1", "W2", "W3", "W4", "W5", "A1", "Z1"} {
		if !strings.Contains(hs, fmt.Sprintf("<h2 id=\"%s\">", id)) {
			t.Errorf("HTML lacks section %s", id)
		}
	}
	for _, s := range []string{"<!DOCTYPE html>", "</main></body></html>", "Failed cells:", "A1 (beyond the seeds)", "The goal.", "<polyline", "<rect", "class=\"legend\"", "<table class=\"kv\">"} {
		if !strings.Contains(hs, s) {
			t.Errorf("HTML lacks %q", s)
		}
	}
	for _, s := range []string{"NaN", "Inf", "ZgotmplZ"} {
		if strings.Contains(hs, s) {
			t.Errorf("HTML contains %q", s)
		}
	}
}
