package fuseuring

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

func TestLayout(t *testing.T) {
	var h reqHeader
	var c cmdReq
	for _, s := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(struct fuse_uring_req_header)", unsafe.Sizeof(h), 288},
		{"sizeof(struct fuse_uring_ent_in_out)", unsafe.Sizeof(h.EntInOut), 32},
		{"sizeof(struct fuse_uring_cmd_req)", unsafe.Sizeof(c), 24},
		{"offsetof(fuse_uring_req_header, op_in)", unsafe.Offsetof(h.OpIn), 128},
		{"offsetof(fuse_uring_req_header, ring_ent_in_out)", unsafe.Offsetof(h.EntInOut), 256},
		{"offsetof(fuse_uring_ent_in_out, commit_id)", unsafe.Offsetof(h.EntInOut.CommitID), 8},
		{"offsetof(fuse_uring_ent_in_out, payload_sz)", unsafe.Offsetof(h.EntInOut.PayloadSz), 16},
		{"offsetof(fuse_uring_ent_in_out, reserved)", unsafe.Offsetof(h.EntInOut.Reserved), 24},
		{"offsetof(fuse_uring_cmd_req, commit_id)", unsafe.Offsetof(c.CommitID), 8},
		{"offsetof(fuse_uring_cmd_req, qid)", unsafe.Offsetof(c.QID), 16},
		// The iovecs of a REGISTER sit right after the header, and the
		// next header starts 64-byte aligned.
		{"entry stride", entStride % 64, 0},
		{"header+iovecs fit the stride", min(entStride, reqHeaderSize+32), reqHeaderSize + 32},
	} {
		if s.got != s.want {
			t.Errorf("%s = %d, want %d", s.name, s.got, s.want)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		err  bool
	}{
		{"0-1\n", 2, false},
		{"0", 1, false},
		{"0-3,8-11", 8, false},
		{"0,2,4", 3, false},
		{"", 0, true},
		{"3-1", 0, true},
		{"a-b", 0, true},
	} {
		got, err := parseCPUList(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseCPUList(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestSysfs(t *testing.T) {
	dir := t.TempDir()
	saved := [3]string{enableURingPath, fuseModulePath, possibleCPUsPath}
	t.Cleanup(func() { enableURingPath, fuseModulePath, possibleCPUsPath = saved[0], saved[1], saved[2] })
	fuseModulePath = filepath.Join(dir, "fuse")
	enableURingPath = filepath.Join(fuseModulePath, "parameters", "enable_uring")
	possibleCPUsPath = filepath.Join(dir, "possible")

	if err := Supported(); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("Supported without the module = %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(enableURingPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Supported(); err == nil || !strings.Contains(err.Error(), "CONFIG_FUSE_IO_URING") {
		t.Errorf("Supported without the parameter = %v", err)
	}
	if err := os.WriteFile(enableURingPath, []byte("N\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Supported(); err != nil {
		t.Errorf("Supported = %v", err)
	}
	for i, want := range []bool{true, false} {
		changed, err := Enable()
		if err != nil || changed != want {
			t.Errorf("Enable #%d = %v, %v; want %v", i, changed, err, want)
		}
	}
	if on, err := Enabled(); !on || err != nil {
		t.Errorf("Enabled = %v, %v", on, err)
	}
	if changed, err := Disable(); !changed || err != nil {
		t.Errorf("Disable = %v, %v", changed, err)
	}
	if err := os.WriteFile(possibleCPUsPath, []byte("0-3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := PossibleCPUs(); n != 4 || err != nil {
		t.Errorf("PossibleCPUs = %d, %v", n, err)
	}
	err := Config{Fd: -1, Queues: 3, Depth: 0, PayloadSize: 100}.Validate()
	for _, want := range []string{"Fd -1", "Queues 3", "Depth 0", "PayloadSize 100", "SQPollIdle 0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to mention %q", err, want)
		}
	}
	c := Config{Fd: 3}
	if err := c.EnsureDefaults(); err != nil || c.Queues != 4 || c.Depth != 8 || c.PayloadSize != DefaultPayloadSize {
		t.Errorf("EnsureDefaults = %v: %v", err, c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate of defaults: %v", err)
	}
	if _, err := Start(Config{Fd: 3, Queues: 5}); err == nil || !strings.Contains(err.Error(), "possible CPU") {
		t.Errorf("Start with 5 queues on 4 CPUs = %v", err)
	}
}

func TestMaxPayload(t *testing.T) {
	for _, c := range []struct {
		maxWrite uint32
		maxPages uint16
		want     int
	}{
		{4096, 1, 8192},
		{1 << 20, 256, 1 << 20},
		{128 << 10, 256, 1 << 20},
		{2 << 20, 32, 2 << 20},
	} {
		if got := MaxPayload(c.maxWrite, c.maxPages, 4096); got != c.want {
			t.Errorf("MaxPayload(%d, %d) = %d, want %d", c.maxWrite, c.maxPages, got, c.want)
		}
	}
}

// TestCommitMisuse checks the refusals Commit makes before it touches the
// ring: an entry of another queue, a payload length out of range, an entry
// that holds no request, and a closed queue.
func TestCommitMisuse(t *testing.T) {
	q, other := &Queue{qid: 1}, &Queue{qid: 2}
	e := &Entry{q: q, payload: make([]byte, 16)}
	for _, c := range []struct {
		name string
		e    *Entry
		n    int
		want string
	}{
		{"nil entry", nil, 0, "another queue"},
		{"foreign entry", &Entry{q: other}, 0, "another queue"},
		{"negative length", e, -1, "outside [0, 16]"},
		{"long payload", e, 17, "outside [0, 16]"},
		{"no request", e, 4, "holds no request"},
	} {
		if err := q.Commit(c.e, c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Commit = %v, want an error saying %q", c.name, err, c.want)
		}
	}
	e.state.Store(entServer)
	q.closed.Store(true)
	if err := q.Commit(e, 4); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit on a closed queue = %v, want ErrClosed", err)
	}
	if e.state.Load() != entServer {
		t.Error("a refused Commit took the entry from its holder")
	}
}
