// Command metaops is the metadata-call load of the fusefs benchmark
// (fusefs/bench/run.sh, cases utime, chmod, open, stat): one system call in
// a loop on one file in DIR for a number of seconds, by one thread, and its
// rate printed as fio's JSON output prints IOPS (jobs[0].write.iops), with
// the seconds it ran, so that run.sh reports it beside fio's cases.
//
//	metaops -op utime|chmod|open|stat -seconds N DIR
//
// utime is utimensat(2) with explicit times (the kernel sends a SETATTR),
// chmod flips the mode between 0644 and 0600, open is open(2) and close(2)
// of the file read-only, stat is fstatat(2) (through the mount mostly the
// kernel's attribute cache).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	op := flag.String("op", "utime", "utime, chmod, open or stat")
	seconds := flag.Float64("seconds", 5, "how long to run")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: metaops -op OP -seconds N DIR")
		os.Exit(2)
	}
	path := filepath.Join(flag.Arg(0), "metaops.f")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	call, err := opCall(*op, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	deadline := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	start := time.Now()
	var n int64
	for ; n%256 != 0 || time.Now().Before(deadline); n++ {
		if err := call(n); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", *op, err)
			os.Exit(1)
		}
	}
	secs := time.Since(start).Seconds()
	os.Remove(path)
	rate := float64(n) / secs
	out := map[string]any{"seconds": secs, "jobs": []any{map[string]any{
		"read":  map[string]float64{"iops": 0, "bw_bytes": 0},
		"write": map[string]float64{"iops": rate, "bw_bytes": 0},
	}}}
	json.NewEncoder(os.Stdout).Encode(out)
}

// opCall returns the call op makes on path, the nth time.
func opCall(op, path string) (func(n int64) error, error) {
	switch op {
	case "utime":
		return func(n int64) error {
			ts := []unix.Timespec{{Sec: n, Nsec: 0}, {Sec: n, Nsec: 1}}
			return unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, 0)
		}, nil
	case "chmod":
		return func(n int64) error { return unix.Chmod(path, uint32(0o600+0o44*(n&1))) }, nil
	case "open":
		return func(int64) error {
			fd, err := unix.Open(path, unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			return unix.Close(fd)
		}, nil
	case "stat":
		var st unix.Stat_t
		return func(int64) error { return unix.Stat(path, &st) }, nil
	}
	return nil, fmt.Errorf("unknown op %q", op)
}
