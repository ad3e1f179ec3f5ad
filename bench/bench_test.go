package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/internal/harness/fio"
)

func TestParseOnly(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		err  bool
	}{
		{"W1,W3", "W1 W3", false},
		{"w2, 5", "W2 W5", false},
		{"W1,W1", "W1", false},
		{"a1, Z1,w4", "A1 Z1 W4", false},
		{"W6", "", true},
		{"A2", "", true},
		{",", "", true},
	} {
		got, err := ParseOnly(c.in)
		if (err != nil) != c.err || strings.Join(got, " ") != c.want {
			t.Errorf("ParseOnly(%q) = %v, %v; want %q, error %t", c.in, got, err, c.want, c.err)
		}
	}
}

func TestMedian(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4 = %v", m)
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of none is not NaN")
	}
}

// TestFioArgs pins the fio command line of each workload shape: the
// report's traceability rests on it.
func TestFioArgs(t *testing.T) {
	f := fioRunner{path: "/usr/bin/fio"}
	j := sysJob{name: "w3", rw: "randwrite", path: "/d/f", direct: true, ioengine: "io_uring", forceAsync: true, bs: 4096,
		numjobs: 8, iodepth: 8, size: 1 << 30, runtime: time.Second, ramp: 300 * time.Millisecond, timeBased: true}
	want := "/usr/bin/fio --name=w3 --filename=/d/f --rw=randwrite --bs=4096 --direct=1 --ioengine=io_uring --force_async=1 --iodepth=8 --numjobs=8 " +
		"--size=1073741824 --runtime=1000ms --time_based --ramp_time=300ms --norandommap --randrepeat=0 --allow_file_create=0 --fallocate=none --invalidate=1 " +
		"--group_reporting --output-format=json"
	if got := f.cmdline(j); got != want {
		t.Errorf("cmdline:\n got %s\nwant %s", got, want)
	}
	j5 := sysJob{name: "w5", rw: "write", path: "/d/g", ioengine: "psync", bs: 512 << 10, numjobs: 1, iodepth: 1, size: 256 << 20,
		runtime: time.Second, sync: true, endFsync: true}
	b := strings.Join(f.batchArgs([]sysJob{j, j5}), " ")
	if !strings.HasPrefix(b, "--group_reporting --output-format=json --name=w3 ") || strings.Count(b, "--stonewall --new_group") != 2 ||
		!strings.Contains(b, "--name=w5 --filename=/d/g --rw=write --bs=524288 --direct=0 --ioengine=psync --iodepth=1 --numjobs=1 --size=268435456 --runtime=1000ms --sync=1 --end_fsync=1") {
		t.Errorf("batch args: %s", b)
	}
	// Z1's fresh file: fio makes and fallocates it, and keeps its random
	// map (no --norandommap).
	jz := sysJob{name: "z1", rw: "randwrite", path: "/d/z", direct: true, ioengine: "libaio", bs: 512, numjobs: 1, iodepth: 32, size: 256 << 20,
		runtime: time.Second, ramp: 50 * time.Millisecond, timeBased: true, fresh: true, randseed: 61}
	if got, want := f.cmdline(jz), "/usr/bin/fio --name=z1 --filename=/d/z --rw=randwrite --bs=512 --direct=1 --ioengine=libaio --iodepth=32 "+
		"--numjobs=1 --size=268435456 --runtime=1000ms --time_based --ramp_time=50ms --randrepeat=0 --randseed=61 --fallocate=native "+
		"--invalidate=1 --group_reporting --output-format=json"; got != want {
		t.Errorf("cmdline:\n got %s\nwant %s", got, want)
	}
	j4 := sysJob{name: "w4-qd8", rw: "randread", path: "/d/f", ioengine: "io_uring", bs: 4096, numjobs: 1, iodepth: 8, size: 1 << 30,
		runtime: time.Second, timeBased: true, randseed: 89}
	if got, want := f.cmdline(j4), "/usr/bin/fio --name=w4-qd8 --filename=/d/f --rw=randread --bs=4096 --direct=0 --ioengine=io_uring --iodepth=8 "+
		"--numjobs=1 --size=1073741824 --runtime=1000ms --time_based --norandommap --randrepeat=0 --randseed=89 --allow_file_create=0 --fallocate=none "+
		"--invalidate=1 --group_reporting --output-format=json"; got != want {
		t.Errorf("cmdline:\n got %s\nwant %s", got, want)
	}
}

// TestFioResult: fio's figures of a job group (parsed by
// internal/harness/fio) become the peer's metrics.
func TestFioResult(t *testing.T) {
	fr := fio.Result{Cmdline: "fio --name=w2", Read: fio.DirStats{IOs: 7980, Bytes: 7980 * 512},
		Write: fio.DirStats{IOs: 8020, Bytes: 8020 * 512}, Elapsed: 201 * time.Millisecond, CPU: 150 * time.Millisecond, Switches: 9000}
	r := fioResult(fr)
	want := sysResult{readIOs: 7980, writeIOs: 8020, readBytes: 7980 * 512, writeBytes: 8020 * 512, elapsed: 201 * time.Millisecond,
		cpu: 150 * time.Millisecond, switches: 9000, cmdline: "fio --name=w2"}
	if r != want {
		t.Errorf("fioResult = %+v, want %+v", r, want)
	}
	m := r.metrics(true)
	if m["iops"] <= 0 || m["read_iops"]+m["write_iops"] != m["iops"] {
		t.Errorf("metrics %v", m)
	}
}

// TestFindAfterJSON checks that a report read back from JSON (numbers as
// float64) renders the same text as the one in memory.
func TestFindAfterJSON(t *testing.T) {
	rep := &Report{Env: Env{Sizing: "test"}}
	e := Experiment{ID: "W2", Seed: "000"}
	for _, pol := range w2Policies {
		for _, bs := range w2BS {
			e.Rows = append(e.Rows, Row{Target: TargetEngine, Policy: pol.label, Params: map[string]any{"bs": bs},
				Metrics: map[string]float64{"iops": float64(bs), "read_iops": 1, "write_iops": 2}})
		}
	}
	rep.Experiments = append(rep.Experiments, e)
	var a, js bytes.Buffer
	rep.WriteText(&a)
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(&js)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	back.WriteText(&b)
	if a.String() != b.String() {
		t.Errorf("text differs after a JSON round trip:\n%s\n---\n%s", a.String(), b.String())
	}
	if back.Experiment("W2").Find(TargetEngine, PolicyConcurrent, map[string]any{"bs": 512}) == nil {
		t.Error("Find fails after JSON")
	}
}

func TestAxis(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0.9, 1}, {1.3, 2}, {2.2, 2.5}, {4100, 5000}, {73000, 100000}} {
		if got := niceCeil(c.in); got != c.want {
			t.Errorf("niceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	a := newAxis([]float64{0.4, 190}, true)
	if a.lo != 0.1 || a.hi != 1000 {
		t.Errorf("log axis %+v", a)
	}
	if fmtTick(1500) != "1.5k" || fmtTick(2000) != "2k" || fmtTick(0.25) != "0.25" {
		t.Errorf("ticks %s %s %s", fmtTick(1500), fmtTick(2000), fmtTick(0.25))
	}
}

// TestMountOf: the mount holding a directory is found through symbolic
// links, and "/" is a mount point.
func TestMountOf(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	m, ok := mountOf(dir)
	if !ok || m.FSType == "" || !strings.HasPrefix(dir, m.Point) {
		t.Fatalf("mountOf(%s) = %+v, %t", dir, m, ok)
	}
	if m2, ok := mountOf(link); !ok || m2.Point != m.Point || m2.Source != m.Source {
		t.Errorf("mountOf(%s) = %+v, %t; want the mount of %s, %+v", link, m2, ok, dir, m)
	}
	if !isMountPoint("/") {
		t.Errorf(`isMountPoint("/") = false`)
	}
	if isMountPoint(dir) && m.Point != dir {
		t.Errorf("isMountPoint(%s) = true, but it lies in the mount at %s", dir, m.Point)
	}
}

// TestVerifyRecords: A1's check finds a missing, a doubled, a torn and a
// foreign record, and a wrong size.
func TestVerifyRecords(t *testing.T) {
	const bs = 4096
	counts := []int64{3, 2}
	var file []byte
	for _, r := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}} {
		rec := make([]byte, bs)
		fillRecordBody(rec, r[0])
		tagRecord(rec, r[0], int64(r[1]))
		file = append(file, rec...)
	}
	check := func(name string, b []byte, counts []int64, want string) {
		t.Helper()
		err := verifyRecords(bytes.NewReader(b), int64(len(b)), bs, counts)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want one saying %q", name, err, want)
		}
	}
	check("whole", file, counts, "")
	check("one more expected", file, []int64{4, 2}, "records were lost or overwritten")
	doubled := bytes.Clone(file)
	copy(doubled[4*bs:], doubled[:bs])
	check("doubled", doubled, counts, "appender 0 #0 appears twice")
	torn := bytes.Clone(file)
	copy(torn[2*bs:2*bs+bs/2], file[3*bs:3*bs+bs/2])
	check("torn", torn, counts, "torn: head says appender 1 #1, tail appender 0 #1")
	zeros := bytes.Clone(file)
	clear(zeros[bs : 2*bs])
	check("zeros", zeros, counts, "no tag")
	check("never written", file, []int64{3, 1, 1}, "appender 1 #1 was never written")
}
