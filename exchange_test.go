package sluice

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"
)

// blocksOf builds file contents from a string of block letters: 'A' to 'Z'
// a 4 KiB block of that byte, '0' zeros; size cuts the result.
func blocksOf(spec string, size int) []byte {
	b := make([]byte, 0, len(spec)*4096)
	for _, c := range spec {
		v := byte(0)
		if c != '0' {
			v = byte(c)
		}
		b = append(b, bytes.Repeat([]byte{v}, 4096)...)
	}
	if size >= 0 && size < len(b) {
		b = b[:size]
	}
	return b
}

// exchangeFiles makes /f1 and /f2 with the given contents (holes where
// the spec says '0' and hole is set), open O_RDWR.
func exchangeFiles(t *testing.T, e *testEnv, c1, c2 []byte) (*File, *File) {
	t.Helper()
	var fs [2]*File
	for i, c := range [][]byte{c1, c2} {
		f := e.mustCreate([]string{"/f1", "/f2"}[i], 0)
		for off := 0; off < len(c); off += 4096 {
			blk := c[off:min(off+4096, len(c))]
			if !bytes.Equal(blk, make([]byte, len(blk))) {
				if _, err := f.Pwrite(blk, int64(off), 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := f.Truncate(int64(len(c))); err != nil {
			t.Fatal(err)
		}
		fs[i] = f
	}
	return fs[0], fs[1]
}

// TestExchangeRange: XFS_IOC_EXCHANGE_RANGE's results and refusals, as
// 6.18 XFS gives them (measured on a loop device).
func TestExchangeRange(t *testing.T) {
	for _, c := range []struct {
		name               string
		c1, c2             []byte
		off1, off2, n      int64
		flags              uint64
		want1, want2       []byte
		err                error
		timesChange, dsync bool
	}{
		{name: "first blocks", c1: blocksOf("AA", -1), c2: blocksOf("BB", -1), n: 4096,
			want1: blocksOf("BA", -1), want2: blocksOf("AB", -1), timesChange: true},
		{name: "across", c1: blocksOf("AA", -1), c2: blocksOf("BB", -1), off2: 4096, n: 4096,
			want1: blocksOf("BA", -1), want2: blocksOf("BA", -1), timesChange: true, dsync: true},
		{name: "unaligned offset", c1: blocksOf("AA", -1), c2: blocksOf("BB", -1), off1: 100, n: 4096, err: syscall.EINVAL},
		{name: "unaligned length inside", c1: blocksOf("AA", -1), c2: blocksOf("BB", -1), n: 100, err: syscall.EINVAL},
		{name: "past EOF", c1: blocksOf("AA", -1), c2: blocksOf("BB", -1), n: 3 * 4096, err: syscall.EINVAL},
		{name: "to both EOFs", c1: blocksOf("AA", 5000), c2: blocksOf("BB", 5000), n: 5000,
			want1: blocksOf("BB", 5000), want2: blocksOf("AA", 5000), timesChange: true},
		{name: "tail not at both EOFs", c1: blocksOf("AA", 5000), c2: blocksOf("BBBBB", 20000), n: 5000, err: syscall.EINVAL},
		{name: "length 0", c1: blocksOf("AA", -1), c2: blocksOf("BB", -1), n: 0,
			want1: blocksOf("AA", -1), want2: blocksOf("BB", -1), timesChange: true},
		{name: "offset past EOF", c1: blocksOf("AA", -1), c2: blocksOf("BB", -1), off1: 3 * 4096, err: syscall.EINVAL},
		{name: "to EOF", c1: blocksOf("BB", 5000), c2: blocksOf("AAA", 12000), flags: ExchangeToEOF, n: 123,
			want1: blocksOf("AAA", 12000), want2: blocksOf("BB", 5000), timesChange: true},
		{name: "to EOF, other offsets", c1: blocksOf("AAAAA", 20000), c2: blocksOf("BB", -1), off2: 4096, flags: ExchangeToEOF,
			want1: blocksOf("B", -1), want2: blocksOf("BAAAAA", 24096), timesChange: true},
		{name: "dry run", c1: blocksOf("AA", -1), c2: blocksOf("BB", -1), n: 4096, flags: ExchangeDryRun,
			want1: blocksOf("AA", -1), want2: blocksOf("BB", -1)},
		{name: "file1 written", c1: blocksOf("0A0", -1), c2: blocksOf("BBB", -1), n: 3 * 4096, flags: ExchangeFile1Written,
			want1: blocksOf("0B0", -1), want2: blocksOf("BAB", -1), timesChange: true},
		{name: "all of file1", c1: blocksOf("0A0", -1), c2: blocksOf("BBB", -1), n: 3 * 4096,
			want1: blocksOf("BBB", -1), want2: blocksOf("0A0", -1), timesChange: true},
		{name: "bad flag", c1: blocksOf("AA", -1), c2: blocksOf("BB", -1), n: 4096, flags: 16, err: syscall.EINVAL},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envConfig{})
			f1, f2 := exchangeFiles(t, e, c.c1, c.c2)
			if err := e.fs.SyncAll(); err != nil {
				t.Fatal(err)
			}
			a1, _ := f1.Stat()
			a2, _ := f2.Stat()
			time.Sleep(2 * time.Millisecond) // times are nanoseconds: any later call differs
			flags := c.flags
			if c.dsync {
				flags |= ExchangeDsync
			}
			err := f2.ExchangeRange(f1, c.off1, c.off2, c.n, flags)
			if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
				t.Fatalf("ExchangeRange: %v, want %v", err, c.err)
			}
			if c.err != nil {
				c.want1, c.want2 = c.c1, c.c2
			}
			wantBytes(t, "file1", f1, c.want1)
			wantBytes(t, "file2", f2, c.want2)
			b1, _ := f1.Stat()
			b2, _ := f2.Stat()
			changed := b1.Mtime != a1.Mtime && b2.Mtime != a2.Mtime && b1.Ctime != a1.Ctime
			if changed != c.timesChange {
				t.Fatalf("times changed %v, want %v", changed, c.timesChange)
			}
			checkClean(t, e.fs)
		})
	}
}

// TestExchangeRangeRefusals: handles open the wrong way, directories,
// overlapping ranges of one file.
func TestExchangeRangeRefusals(t *testing.T) {
	e := newEnv(t, envConfig{})
	f1, f2 := exchangeFiles(t, e, blocksOf("AAAA", -1), blocksOf("BB", -1))
	ro, _ := e.fs.OpenFile("/f1", O_RDONLY, 0)
	wo, _ := e.fs.OpenFile("/f1", O_WRONLY, 0)
	app, _ := e.fs.OpenFile("/f1", O_RDWR|O_APPEND, 0)
	if err := e.fs.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, _ := e.fs.OpenFile("/d", O_RDONLY|O_DIRECTORY, 0)
	for _, c := range []struct {
		name       string
		f2, f1     *File
		off1, off2 int64
		n          int64
		want       error
	}{
		{"file1 read-only", f2, ro, 0, 0, 4096, syscall.EBADF},
		{"file1 write-only", f2, wo, 0, 0, 4096, syscall.EBADF},
		{"file1 append", f2, app, 0, 0, 4096, syscall.EBADF},
		{"directory", f2, dir, 0, 0, 4096, syscall.EISDIR},
		{"negative", f2, f1, -4096, 0, 4096, syscall.EINVAL},
		{"same file, overlapping", f1, f1, 0, 4096, 8192, syscall.EINVAL},
		{"same file, apart", f1, f1, 0, 8192, 8192, nil},
	} {
		if err := c.f2.ExchangeRange(c.f1, c.off1, c.off2, c.n, 0); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	checkClean(t, e.fs)
}

// TestExchangeRangeCrash: a crash after an exchange shows both files as
// they were before it or both as after, never one of each.
func TestExchangeRangeCrash(t *testing.T) {
	for seed := range uint64(10) {
		e := newEnv(t, envConfig{})
		f1, f2 := exchangeFiles(t, e, blocksOf("AAAA", -1), blocksOf("BBBB", -1))
		if err := e.fs.SyncAll(); err != nil {
			t.Fatal(err)
		}
		if err := f2.ExchangeRange(f1, 4096, 0, 2*4096, 0); err != nil {
			t.Fatal(err)
		}
		if seed%3 == 0 {
			if err := f2.Fsync(); err != nil {
				t.Fatal(err)
			}
		}
		c := e.crash(seed)
		checkClean(t, c.fs)
		g1, _ := c.fs.OpenFile("/f1", O_RDONLY, 0)
		g2, _ := c.fs.OpenFile("/f2", O_RDONLY, 0)
		d1, d2 := mustReadAll(t, g1), mustReadAll(t, g2)
		before := bytes.Equal(d1, blocksOf("AAAA", -1)) && bytes.Equal(d2, blocksOf("BBBB", -1))
		after := bytes.Equal(d1, blocksOf("ABBA", -1)) && bytes.Equal(d2, blocksOf("AABB", -1))
		if !before && !after || seed%3 == 0 && !after {
			t.Fatalf("seed %d: after the crash f1 %q f2 %q", seed, blockLetters(d1), blockLetters(d2))
		}
	}
}

// blockLetters renders contents made by blocksOf back as letters.
func blockLetters(b []byte) string {
	var s []byte
	for off := 0; off < len(b); off += 4096 {
		c := b[off]
		if c == 0 {
			c = '0'
		}
		s = append(s, c)
	}
	return string(s)
}

// TestExchangeToEOFLeavesNothingPastEOF: after a TO_EOF exchange that
// leaves a file shorter than what it held, nothing of what lay past the
// new EOF comes back: not cached pages (a truncate up shows zeros; fstest
// B20), not written blocks (fsck clean after fsync), not the tail of the
// EOF block (a second exchange that moves that block shows only the bytes
// below its EOF; fstest B27).
func TestExchangeToEOFLeavesNothingPastEOF(t *testing.T) {
	e := newEnv(t, envConfig{})
	f1, f2 := exchangeFiles(t, e, blocksOf("A", -1), blocksOf("BBB", -1)) // buffered, not synced
	// [0, 8192) of f1 with [4096, 12288) of f2: f2 ends at 8192.
	if err := f2.ExchangeRange(f1, 0, 4096, 0, ExchangeToEOF); err != nil {
		t.Fatal(err)
	}
	if err := f2.Truncate(3 * 4096); err != nil {
		t.Fatal(err)
	}
	wantBytes(t, "file2 grown after the exchange", f2, blocksOf("BA0", -1))
	if err := f2.Fsync(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, e.fs)

	e = newEnv(t, envConfig{})
	g1, g2 := exchangeFiles(t, e, blocksOf("AAA", 9000), blocksOf("BB", 5000))
	g3 := e.mustCreate("/f3", 0)
	if _, err := g3.Pwrite(blocksOf("CCC", -1), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := g2.ExchangeRange(g1, 4096, 0, 0, ExchangeToEOF); err != nil {
		t.Fatal(err)
	}
	if err := g3.ExchangeRange(g1, 4096, 0, 0, ExchangeToEOF); err != nil {
		t.Fatal(err)
	}
	// g1 is A then g2's 5000 bytes; g3 ends where g1's EOF lands.
	wantBytes(t, "file3", g3, blocksOf("BB", 5000))
	checkClean(t, e.fs)
}
