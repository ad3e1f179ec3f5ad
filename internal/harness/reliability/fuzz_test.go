package reliability

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/volume"
)

// Part 4: fuzz targets. Their seeds are committed in testdata/fuzz/<Target>
// (written from fuzzSeeds by TestWriteSeedCorpus -write-seed-corpus), and
// `go test` runs them as ordinary tests; fuzz.sh runs each target for a
// while (`go test -fuzz` takes one target per run). The decoders are exported,
// so every target lives here; none needs to sit next to unexported code.
//
// What the decoders protect: the volume header and every metadata value
// carry a CRC-32C, so any corruption of up to 32 consecutive bits is
// caught (FuzzHeaderCorruption, FuzzMetaValueCorruption) and random
// garbage is caught but with probability 2^-32. Metadata keys carry no
// checksum (Pebble checksums its blocks on disk; a key changed through the
// KV API is not corruption that sluice can see), and file data carries
// none at all: a flipped bit in a data block is read back as is
// (TestCorruptDataIsNotChecksummed).

// FuzzDecodeHeader: volume.DecodeHeader never panics on any bytes; what it
// accepts re-encodes to the same 64 bytes and has a sane geometry.
func FuzzDecodeHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := volume.DecodeHeader(b)
		if err != nil {
			if !errors.Is(err, volume.ErrBadHeader) {
				t.Fatalf("error %v does not wrap ErrBadHeader", err)
			}
			return
		}
		if !bytes.Equal(h.Encode(), b[:volume.HeaderSize]) {
			t.Fatalf("header %+v does not re-encode to its bytes", h)
		}
		bs := uint64(h.BlockSize)
		switch {
		case h.Format != volume.HeaderFormat:
			t.Fatalf("accepted format %d", h.Format)
		case bs < 512 || bs > 64<<10 || bs&(bs-1) != 0:
			t.Fatalf("accepted block size %d", bs)
		case h.IOUnit < 512 || h.IOUnit&(h.IOUnit-1) != 0:
			t.Fatalf("accepted I/O unit %d", h.IOUnit)
		case h.DeviceBytes%bs != 0 || h.DataStart == 0 || h.DataStart >= h.DeviceBytes/bs:
			t.Fatalf("accepted geometry %+v", h)
		}
	})
}

func seedHeaders() []*volume.Header {
	return []*volume.Header{
		{Format: 1, UUID: [16]byte{1, 2, 3}, BlockSize: 4096, IOUnit: 512, DeviceBytes: 64 << 20, DataStart: 1},
		{Format: 1, BlockSize: 512, IOUnit: 4096, DeviceBytes: 1 << 20, DataStart: 8},
		{Format: 1, BlockSize: 65536, IOUnit: 65536, DeviceBytes: 1 << 40, DataStart: 1},
	}
}

// FuzzHeaderCorruption: a valid header with a burst of up to 32 bits
// flipped never decodes (the CRC-32C catches every such burst).
func FuzzHeaderCorruption(f *testing.F) {
	f.Fuzz(func(t *testing.T, bs, unit uint32, devBytes, dataStart uint64, bit uint16, burst uint32) {
		h := &volume.Header{Format: 1, UUID: [16]byte{9}, BlockSize: bs, IOUnit: unit, DeviceBytes: devBytes, DataStart: dataStart}
		b := h.Encode()
		if _, err := volume.DecodeHeader(b); err != nil || burst == 0 {
			return // only valid headers, really corrupted, are of interest
		}
		if flipBurst(b, int(bit)%(len(b)*8), burst) == 0 {
			return
		}
		if got, err := volume.DecodeHeader(b); err == nil {
			t.Fatalf("a header with a %032b burst at bit %d decodes: %+v", burst, bit, got)
		}
	})
}

// flipBurst XORs the 32-bit pattern burst into b starting at bit pos
// (clipped at the end of b) and returns how many bits it flipped.
func flipBurst(b []byte, pos int, burst uint32) int {
	n := 0
	for i := 0; i < 32; i++ {
		if burst&(1<<i) == 0 {
			continue
		}
		p := pos + i
		if p >= len(b)*8 {
			break
		}
		b[p/8] ^= 1 << (p % 8)
		n++
	}
	return n
}

// Record kinds of FuzzMetaRecord and FuzzMetaValueCorruption.
const (
	recSuper = iota
	recInode
	recDirent
	recExtent
	recFree
	recBytes
	recOrphan
	numRecKinds
)

// FuzzMetaRecord gives every meta decoder an arbitrary key and value
// together (meta's own FuzzDecode and FuzzKeys fix one of the two): no
// panic, errors wrap ErrCorrupt, and what decodes re-encodes, key and
// value, to the same bytes (so the checks the decoders make on the pair,
// such as the extent and free-run overflow checks that use the key's
// block number, are exercised).
func FuzzMetaRecord(f *testing.F) {
	f.Fuzz(func(t *testing.T, kind byte, key, val []byte) {
		corrupt := func(err error) {
			t.Helper()
			if !errors.Is(err, meta.ErrCorrupt) {
				t.Fatalf("kind %d: error %v does not wrap ErrCorrupt", kind, err)
			}
		}
		switch kind % numRecKinds {
		case recSuper:
			s, err := meta.DecodeSuperblock(val)
			if err != nil {
				corrupt(err)
			} else if !bytes.Equal(meta.EncodeSuperblock(s), val) {
				t.Fatal("superblock does not re-encode")
			}
		case recInode:
			in, err := meta.DecodeInode(val)
			if err != nil {
				corrupt(err)
			} else if in.Ino == 0 || !bytes.Equal(meta.EncodeInode(in), val) {
				t.Fatalf("inode %+v accepted or does not re-encode", in)
			}
		case recDirent:
			parent, name, kerr := meta.DirentName(key)
			if kerr != nil {
				corrupt(kerr)
			} else if !bytes.Equal(meta.DirentKey(parent, name), key) {
				t.Fatal("dirent key does not re-encode")
			}
			d, err := meta.DecodeDirent(val)
			if err != nil {
				corrupt(err)
			} else if d.Ino == 0 || !bytes.Equal(meta.EncodeDirent(d), val) {
				t.Fatalf("dirent %+v accepted or does not re-encode", d)
			}
		case recExtent:
			ino, e, err := meta.DecodeExtent(key, val)
			if err != nil {
				corrupt(err)
				return
			}
			if e.Len == 0 || e.FileBlock+e.Len < e.FileBlock || e.DevBlock+e.Len < e.DevBlock ||
				e.State != meta.Written && e.State != meta.Unwritten {
				t.Fatalf("extent %+v accepted", e)
			}
			if !bytes.Equal(meta.ExtentKey(ino, e.FileBlock), key) || !bytes.Equal(meta.EncodeExtent(e), val) {
				t.Fatal("extent does not re-encode")
			}
		case recFree:
			start, n, err := meta.DecodeFree(key, val)
			if err != nil {
				corrupt(err)
				return
			}
			if n == 0 || start+n < start {
				t.Fatalf("free run %d+%d accepted", start, n)
			}
			if !bytes.Equal(meta.FreeKey(start), key) || !bytes.Equal(meta.EncodeFree(n), val) {
				t.Fatal("free run does not re-encode")
			}
		case recBytes:
			p, err := meta.DecodeBytes("x", val)
			if err != nil {
				corrupt(err)
			} else if !bytes.Equal(meta.EncodeBytes(p), val) {
				t.Fatal("bytes do not re-encode")
			}
		case recOrphan:
			ino, err := meta.OrphanIno(key)
			if err != nil {
				corrupt(err)
			} else if !bytes.Equal(meta.OrphanKey(ino), key) {
				t.Fatal("orphan key does not re-encode")
			}
		}
	})
}

// seedRecords returns a valid key and value of each record kind.
func seedRecords() [numRecKinds][2][]byte {
	return [numRecKinds][2][]byte{
		recSuper:  {meta.SuperKey(), meta.EncodeSuperblock(&meta.Superblock{Format: 1, BlockSize: 4096, SectorSize: 512, DeviceBytes: 1 << 26, DataStart: 1, NextIno: 7})},
		recInode:  {meta.InodeKey(3), meta.EncodeInode(&meta.Inode{Ino: 3, Mode: 0o100644, Nlink: 1, Size: 9})},
		recDirent: {meta.DirentKey(1, "name"), meta.EncodeDirent(meta.Dirent{Ino: 3, Type: syscall.S_IFREG})},
		recExtent: {meta.ExtentKey(3, 4), meta.EncodeExtent(meta.Extent{DevBlock: 10, Len: 2, State: meta.Unwritten})},
		recFree:   {meta.FreeKey(100), meta.EncodeFree(8)},
		recBytes:  {meta.SymlinkKey(4), meta.EncodeBytes([]byte("target"))},
		recOrphan: {meta.OrphanKey(5), meta.EncodeBytes(nil)},
	}
}

// FuzzMetaValueCorruption: a valid value of every kind with a burst of up
// to 32 bits flipped never decodes: metadata corruption is caught, never
// read as a wrong record.
func FuzzMetaValueCorruption(f *testing.F) {
	f.Fuzz(func(t *testing.T, kind byte, x uint64, bit uint16, burst uint32) {
		if burst == 0 {
			return
		}
		var val []byte
		var decode func(v []byte) error
		switch kind % numRecKinds {
		case recSuper:
			val = meta.EncodeSuperblock(&meta.Superblock{Format: 1, BlockSize: uint32(x), DeviceBytes: x, NextIno: meta.Ino(x)})
			decode = func(v []byte) error { _, err := meta.DecodeSuperblock(v); return err }
		case recInode:
			val = meta.EncodeInode(&meta.Inode{Ino: meta.Ino(x | 1), Mode: uint32(x), Size: x, Mtime: int64(x)})
			decode = func(v []byte) error { _, err := meta.DecodeInode(v); return err }
		case recDirent:
			val = meta.EncodeDirent(meta.Dirent{Ino: meta.Ino(x | 1), Type: uint32(x)})
			decode = func(v []byte) error { _, err := meta.DecodeDirent(v); return err }
		case recExtent:
			val = meta.EncodeExtent(meta.Extent{DevBlock: x >> 8, Len: x&0xff | 1, State: meta.Written})
			decode = func(v []byte) error { _, _, err := meta.DecodeExtent(meta.ExtentKey(1, 0), v); return err }
		case recFree:
			val = meta.EncodeFree(x>>2 | 1)
			decode = func(v []byte) error { _, _, err := meta.DecodeFree(meta.FreeKey(0), v); return err }
		default:
			p := make([]byte, x%300+8)
			binary.LittleEndian.PutUint64(p[len(p)-8:], x)
			val = meta.EncodeBytes(p)
			decode = func(v []byte) error { _, err := meta.DecodeBytes("x", v); return err }
		}
		if decode(val) != nil {
			return
		}
		if flipBurst(val, int(bit)%(len(val)*8), burst) == 0 {
			return
		}
		if err := decode(val); err == nil {
			t.Fatalf("kind %d: a value with a %032b burst at bit %d decodes", kind%numRecKinds, burst, bit)
		} else if !errors.Is(err, meta.ErrCorrupt) {
			t.Fatalf("kind %d: %v does not wrap ErrCorrupt", kind%numRecKinds, err)
		}
	})
}

// FuzzPaths runs a sequence of path calls, each with fuzzed paths (any
// bytes: '/', '.', '..', NUL, long components, symlinks, loops) on a tree
// that has directories, files, symlinks and a symlink loop: nothing
// panics, every error is an *os.PathError or *os.LinkError carrying an
// errno, and afterwards the whole tree can be walked and Check is clean.
//
// Input: calls separated by 0xff; a call is an op byte, then the first
// path, then optionally 0xfe and the second path.
func FuzzPaths(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 8<<10 {
			return
		}
		e := newEnv(t, envConfig{size: 4 << 20})
		for _, d := range []string{"/a", "/a/b", "/c"} {
			if err := e.fs.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if f, err := e.fs.Create("/a/f"); err != nil {
			t.Fatal(err)
		} else {
			f.Close()
		}
		for _, l := range [][2]string{{"a/b", "/lb"}, {"loop2", "/loop1"}, {"loop1", "/loop2"}, {"../a", "/a/b/up"}, {"/a/f", "/abs"}} {
			if err := e.fs.Symlink(l[0], l[1]); err != nil {
				t.Fatal(err)
			}
		}
		calls := bytes.Split(in, []byte{0xff})
		if len(calls) > 64 {
			calls = calls[:64]
		}
		for _, c := range calls {
			if len(c) == 0 {
				continue
			}
			op := c[0]
			p1, p2, _ := strings.Cut(string(c[1:]), "\xfe")
			err := pathOp(e.fs, op, p1, p2)
			if err == nil {
				continue
			}
			var pe *os.PathError
			var le *os.LinkError
			if !errors.As(err, &pe) && !errors.As(err, &le) {
				t.Fatalf("op %d (%q, %q): %T %v is not a path error", op%pathOps, p1, p2, err, err)
			}
			if errnoOf(err) == 0 {
				t.Fatalf("op %d (%q, %q): %v carries no errno", op%pathOps, p1, p2, err)
			}
		}
		snapshot(t, e.fs) // every name resolves, every file reads
		checkClean(t, e.fs)
	})
}

const pathOps = 18

// pathOp runs call op of FuzzPaths.
func pathOp(fs *sluice.FS, op byte, p1, p2 string) error {
	closeIt := func(f *sluice.File, err error) error {
		if err == nil {
			f.Close()
		}
		return err
	}
	switch op % pathOps {
	case 0:
		return closeIt(fs.OpenFile(p1, sluice.O_RDWR|sluice.O_CREAT, 0o644))
	case 1:
		return fs.Mkdir(p1, 0o755)
	case 2:
		return fs.Symlink(p2, p1)
	case 3:
		return fs.Rename(p1, p2, uint32(op>>5)&3)
	case 4:
		return fs.Link(p1, p2)
	case 5:
		return fs.Unlink(p1)
	case 6:
		return fs.Rmdir(p1)
	case 7:
		_, err := fs.Stat(p1)
		return err
	case 8:
		_, err := fs.Lstat(p1)
		return err
	case 9:
		_, err := fs.Readlink(p1)
		return err
	case 10:
		_, err := fs.ReadDir(p1)
		return err
	case 11:
		return closeIt(fs.OpenFile(p1, sluice.O_RDONLY, 0))
	case 12:
		return fs.Truncate(p1, 100)
	case 13:
		return fs.Setxattr(p1, "user."+p2, []byte("v"), 0)
	case 14:
		return fs.Chmod(p1, 0o600)
	case 15:
		return closeIt(fs.OpenFile(p1, sluice.O_RDONLY|sluice.O_DIRECTORY, 0))
	case 16:
		return closeIt(fs.OpenFile(p1, sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL, 0o644))
	default:
		return closeIt(fs.OpenFile(p1, sluice.O_RDONLY|sluice.O_NOFOLLOW, 0))
	}
}

// pathSeeds are FuzzPaths inputs that reach the interesting cases.
func pathSeeds() []string {
	call := func(op byte, p1 string, p2 ...string) string {
		s := string([]byte{op}) + p1
		if len(p2) > 0 {
			s += "\xfe" + p2[0]
		}
		return s
	}
	seq := func(cs ...string) string { return strings.Join(cs, "\xff") }
	long := strings.Repeat("x", 256)
	return []string{
		seq(call(0, "/new"), call(7, "/new"), call(5, "/new")),
		seq(call(1, "/a/b/c"), call(3, "/a", "/a/b/c/d"), call(6, "/a")),
		seq(call(7, "/loop1/x"), call(0, "/loop1"), call(17, "/lb")),
		seq(call(0, "/a/./b/../f"), call(7, "/a/b/up/f"), call(7, "/abs")),
		seq(call(0, "/"+long), call(1, "/c/"+long[:255]), call(7, "/c/"+long[:255])),
		seq(call(0, "/nul\x00x"), call(2, "/s", "t\x00u"), call(13, "/a/f", "x\x00y")),
		seq(call(3, "/a/b", "/c/b"), call(3, "/c/b", "/a/b", ""), call(3|2<<5, "/a", "/c")),
		seq(call(4, "/a/f", "/c/g"), call(5, "/a/f"), call(11, "/c/g"), call(12, "/c/g")),
		seq(call(2, "/d", "a/b/up/b/up"), call(10, "/d"), call(15, "/d/"), call(7, "/d/../a")),
		seq(call(0, "a//f/"), call(1, ""), call(6, "/"), call(6, "/a/.."), call(5, "/..")),
		seq(call(16, "/a/f"), call(14, "/loop2"), call(9, "/a"), call(10, "/a/f")),
		seq(call(1, "/"+strings.Repeat("d/", 2100))),
	}
}
