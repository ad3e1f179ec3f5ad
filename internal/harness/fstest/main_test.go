package fstest

import (
	"os"
	"syscall"
	"testing"
)

func TestMain(m *testing.M) {
	// Host creates files with perm minus the umask; the engine and the
	// model apply none.
	syscall.Umask(0)
	code := m.Run()
	tearDownXFS() // the XFS oracles tests made (xfsFor)
	closeEtcd()   // the cluster the etcd targets started
	os.Exit(code)
}

// newTestEngine returns an engine closed at the end of the test.
func newTestEngine(t testing.TB, cfg EngineConfig) *Engine {
	t.Helper()
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("closing %s: %v", e.Name(), err)
		}
	})
	return e
}

// newTestHost returns a Host on a fresh temporary directory (mode 0755,
// like the engine's root).
func newTestHost(t testing.TB) *Host {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := NewHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// checkEngine runs the engine's consistency check.
func checkEngine(t testing.TB, e *Engine) []string {
	t.Helper()
	r, err := e.FS().Check()
	if err != nil {
		return []string{"check failed: " + err.Error()}
	}
	var out []string
	for _, p := range r.Problems {
		out = append(out, "check: "+p.String())
	}
	return out
}
