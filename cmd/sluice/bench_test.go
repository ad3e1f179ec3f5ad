package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bench command's wiring: flags, --from, and a smoke-sized run of one
// experiment. The suite itself is tested in the bench package
// (TestSmokeReport).

func TestBenchFlagMistakes(t *testing.T) {
	benchStderr = io.Discard
	t.Cleanup(func() { benchStderr = os.Stderr })
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--only", "W9"}, `unknown experiment "W9"`},
		{[]string{"bench", "extra"}, `unexpected argument "extra"`},
		{[]string{"bench", "--quick", "--smoke"}, "exclude each other"},
		{[]string{"bench", "--duration", "-1s"}, "--duration must be positive"},
		{[]string{"bench", "--bogus"}, "unknown flag: --bogus"},
	} {
		code, out, errOut := sluiceRun(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "usage: sluice bench") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// TestBenchSmokeRun runs W3 at smoke size with the Go runner in a kept
// --volume directory, then renders its JSON again with --from.
func TestBenchSmokeRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	benchStderr = io.Discard
	t.Cleanup(func() { benchStderr = os.Stderr })
	dir := t.TempDir()
	work, js, page := filepath.Join(dir, "work"), filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html")
	code, out, errOut := sluiceRun(t, "bench", "--smoke", "--only", "W3", "--fio", "none", "--volume", work, "--json", js, "--html", page)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !strings.Contains(out, "=== W3 (seed 002)") || !strings.Contains(out, "parallel/hashed") {
		t.Errorf("stdout lacks the W3 table:\n%s", out)
	}
	var rep struct {
		Env struct {
			Command string `json:"command"`
			WorkDir string `json:"work_dir"`
		} `json:"env"`
		Experiments []struct {
			ID   string `json:"id"`
			Rows []struct {
				Target  string             `json:"target"`
				Metrics map[string]float64 `json:"metrics"`
			} `json:"rows"`
		} `json:"experiments"`
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Experiments) != 1 || rep.Experiments[0].ID != "W3" || len(rep.Experiments[0].Rows) != 5 {
		t.Errorf("report: %+v", rep.Experiments)
	}
	if !strings.HasPrefix(rep.Env.Command, "sluice bench --smoke --only W3") {
		t.Errorf("env.command = %q", rep.Env.Command)
	}
	// --volume keeps the volumes for the next run.
	if _, err := os.Stat(filepath.Join(work, "vol", "data")); err != nil {
		t.Errorf("the kept work directory lost its volume: %v", err)
	}
	if h, err := os.ReadFile(page); err != nil || !strings.Contains(string(h), "<svg") {
		t.Errorf("HTML: %v, %d bytes", err, len(h))
	}
	// --from renders the same tables again without measuring.
	code, out2, errOut := sluiceRun(t, "bench", "--from", js)
	if code != 0 || out2 != out {
		t.Errorf("--from: exit %d, stderr %q; tables differ:\n%s\n---\n%s", code, errOut, out, out2)
	}
}
