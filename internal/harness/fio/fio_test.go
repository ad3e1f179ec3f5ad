package fio

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestArgs: each field becomes its option, in a fixed order, and a zero
// field is left out (Direct always written).
func TestArgs(t *testing.T) {
	for _, c := range []struct {
		j    Job
		want string
	}{
		{Job{Name: "x"}, "--name=x --direct=0"},
		{Job{Name: "x", Filename: "/d/f", RW: "randread", BS: 4096, Direct: true, IOEngine: "io_uring", IODepth: 32, TimeBased: true,
			Runtime: 1500 * time.Millisecond},
			"--name=x --filename=/d/f --rw=randread --bs=4096 --direct=1 --ioengine=io_uring --iodepth=32 --runtime=1500ms --time_based"},
		{Job{Name: "r", Filename: "/v/data", RW: "randread", BS: 4096, IOEngine: "psync", IODepth: 1, Size: 1 << 20, Offset: 8192,
			RandSeed: 7, Invalidate: true},
			"--name=r --filename=/v/data --rw=randread --bs=4096 --direct=0 --ioengine=psync --iodepth=1 --size=1048576 --offset=8192 --randseed=7 --invalidate=1"},
		{Job{Name: "verify", Directory: "/mnt", RW: "randwrite", BS: 4096, Direct: true, IOEngine: "libaio", IODepth: 16, NumJobs: 4,
			Size: 2 << 20, OffsetIncrement: 2 << 20, Verify: "crc32c"},
			"--name=verify --directory=/mnt --rw=randwrite --bs=4096 --direct=1 --ioengine=libaio --iodepth=16 --numjobs=4 --size=2097152 " +
				"--offset_increment=2097152 --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0"},
		{Job{Name: "w", RW: "write", Ramp: 300 * time.Millisecond, Sync: true, EndFsync: true, ForceAsync: true, NoRandomMap: true,
			NoRandRepeat: true, NoFileCreate: true, Fallocate: "none"},
			"--name=w --rw=write --direct=0 --force_async=1 --ramp_time=300ms --sync=1 --end_fsync=1 --norandommap --randrepeat=0 " +
				"--allow_file_create=0 --fallocate=none"},
		// --directory before --filename: fio resolves the file against
		// the directory given before it.
		{Job{Name: "s", Filename: "shared", Directory: "/mnt", RW: "write"}, "--name=s --directory=/mnt --filename=shared --rw=write --direct=0"},
	} {
		if got := strings.Join(c.j.Args(), " "); got != c.want {
			t.Errorf("Args:\n got %s\nwant %s", got, c.want)
		}
	}
	r := Runner{Path: "/usr/bin/fio"}
	if got, want := r.Cmdline(Job{Name: "x"}), "/usr/bin/fio --name=x --direct=0 --group_reporting --output-format=json"; got != want {
		t.Errorf("Cmdline = %s, want %s", got, want)
	}
	b := strings.Join(r.BatchArgs([]Job{{Name: "a"}, {Name: "b"}}), " ")
	if want := "--group_reporting --output-format=json --name=a --direct=0 --stonewall --new_group --name=b --direct=0 --stonewall --new_group"; b != want {
		t.Errorf("BatchArgs = %s, want %s", b, want)
	}
}

// TestParse reads a captured report of a two-job batch (fio 3.33, preceded
// by a notice, as fio sometimes prints one first).
func TestParse(t *testing.T) {
	out, err := os.ReadFile("testdata/fio-batch.json")
	if err != nil {
		t.Fatal(err)
	}
	groups, err := Parse(append([]byte("note: a notice fio printed first\n"), out...))
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[0].JobName != "w2-bs512" || groups[1].JobName != "w2-bs4096" {
		t.Fatalf("groups %+v", groups)
	}
	r, err := groups[0].Result()
	if err != nil {
		t.Fatal(err)
	}
	want := Result{
		Read: DirStats{IOs: 7980, Bytes: 4085760, IOPS: 39701.492537, BW: 20327164, Runtime: 201 * time.Millisecond,
			LatMean: 352870, LatMax: 11392517},
		Write: DirStats{IOs: 7874, Bytes: 4031488, IOPS: 39174.129353, BW: 20057154, Runtime: 201 * time.Millisecond,
			LatMean: 426703, LatMax: 11795808},
		Elapsed: 201 * time.Millisecond,
		// (7.0 + 23.5)% of 200 ms.
		CPU:      61 * time.Millisecond,
		Switches: 975,
	}
	if r != want {
		t.Errorf("Result:\n got %+v\nwant %+v", r, want)
	}
	r2, err := groups[1].Result()
	if err != nil || r2.Elapsed != 292*time.Millisecond || r2.Read.IOs != 162 {
		t.Errorf("second group: %+v, %v", r2, err)
	}

	if _, err := Parse([]byte("fio: file not found")); err == nil {
		t.Error("Parse accepted garbage")
	}
	if _, err := Parse([]byte(`{"jobs": []}`)); err == nil {
		t.Error("Parse accepted a report without jobs")
	}
	if _, err := (Group{JobName: "x", Error: 5}).Result(); err == nil || !strings.Contains(err.Error(), "input/output error") {
		t.Errorf("a job's error: %v", err)
	}
	if _, err := (Group{JobName: "x"}).Result(); err == nil {
		t.Error("a job without run time gave no error")
	}
}

// TestRun runs fio for real, briefly: a verified write, a time-based read
// of the file it wrote, a batch, and a failing job. It skips without fio.
func TestRun(t *testing.T) {
	if !Available() {
		t.Skip("fio is not installed")
	}
	ctx := context.Background()
	dir := t.TempDir()
	w, err := Run(ctx, Job{Name: "w", Directory: dir, RW: "randwrite", BS: 4096, IOEngine: "psync", Size: 1 << 20, Verify: "crc32c"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Write.IOs != 256 || w.Write.Bytes != 1<<20 || w.Elapsed <= 0 {
		t.Errorf("verified write: %+v", w)
	}
	path, _ := LookPath()
	if !strings.HasPrefix(w.Cmdline, path+" --name=w ") {
		t.Errorf("Cmdline %q", w.Cmdline)
	}
	// A file shared by two job processes, named relative to Directory,
	// lands in Directory.
	sh, err := Run(ctx, Job{Name: "s", Directory: dir, Filename: "shared", RW: "write", BS: 4096, IOEngine: "psync",
		NumJobs: 2, Size: 64 << 10, OffsetIncrement: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "shared")); err != nil || st.Size() != 128<<10 || sh.Write.Bytes != 128<<10 {
		t.Errorf("shared file in Directory: %v, %v; %+v", st, err, sh)
	}
	file := filepath.Join(dir, "w.0.0")
	r, err := Run(ctx, Job{Name: "r", Filename: file, RW: "randread", BS: 4096, IOEngine: "psync", TimeBased: true,
		Runtime: 200 * time.Millisecond, NoFileCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Read.IOs <= 0 || r.Read.IOPS <= 0 || r.Write.IOs != 0 || r.Read.LatMean <= 0 {
		t.Errorf("read: %+v", r)
	}

	rs, errs, err := Runner{Path: path}.RunBatch(ctx, []Job{
		{Name: "a", Filename: file, RW: "read", BS: 65536, IOEngine: "psync", NoFileCreate: true},
		{Name: "b", Filename: filepath.Join(dir, "absent"), RW: "read", BS: 4096, IOEngine: "psync", Size: 4096, NoFileCreate: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || rs[0].Read.Bytes != 1<<20 || !strings.HasSuffix(rs[0].Cmdline, "# job a") {
		t.Errorf("batch job a: %+v, %v", rs[0], errs[0])
	}
	var fe *Error
	if !errors.As(errs[1], &fe) {
		t.Errorf("batch job b on a missing file: %v, want an *Error", errs[1])
	}

	if _, err := Run(ctx, Job{Name: "bad", Filename: filepath.Join(dir, "absent"), RW: "read", BS: 4096, Size: 4096,
		NoFileCreate: true}); !errors.As(err, &fe) {
		t.Errorf("a job on a missing file: %v, want an *Error", err)
	} else {
		t.Logf("expected failure: %v", err)
	}
}
