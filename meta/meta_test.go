package meta

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestRoundTrip(t *testing.T) {
	sb := &Superblock{Format: FormatVersion, UUID: [16]byte{1, 2, 3}, BlockSize: 4096, SectorSize: 512, DeviceBytes: 1 << 30, DataStart: 1, NextIno: 7}
	got, err := DecodeSuperblock(EncodeSuperblock(sb))
	if err != nil || *got != *sb {
		t.Fatalf("superblock: %+v %v", got, err)
	}
	in := &Inode{Ino: 9, Mode: 0o100644, Uid: 1, Gid: 2, Nlink: 1, Size: 12345, Atime: -1, Mtime: 2, Ctime: 3, Gen: 4}
	gi, err := DecodeInode(EncodeInode(in))
	if err != nil || *gi != *in {
		t.Fatalf("inode: %+v %v", gi, err)
	}
	d := Dirent{Ino: 5, Type: 0o040000}
	gd, err := DecodeDirent(EncodeDirent(d))
	if err != nil || gd != d {
		t.Fatalf("dirent: %+v %v", gd, err)
	}
	e := Extent{FileBlock: 10, DevBlock: 100, Len: 3, State: Unwritten}
	ino, ge, err := DecodeExtent(ExtentKey(9, 10), EncodeExtent(e))
	if err != nil || ge != e || ino != 9 {
		t.Fatalf("extent: %v %+v %v", ino, ge, err)
	}
	s, n, err := DecodeFree(FreeKey(77), EncodeFree(5))
	if err != nil || s != 77 || n != 5 {
		t.Fatalf("free: %d %d %v", s, n, err)
	}
	b, err := DecodeBytes("x", EncodeBytes([]byte("target")))
	if err != nil || string(b) != "target" {
		t.Fatalf("bytes: %q %v", b, err)
	}
	p, name, err := DirentName(DirentKey(3, "a/b"))
	if err != nil || p != 3 || name != "a/b" {
		t.Fatalf("dirent name: %v %q %v", p, name, err)
	}
}

// TestCorruptionDetected flips every bit of every record kind and checks the
// decoder reports ErrCorrupt (the CRC catches single-bit flips).
func TestCorruptionDetected(t *testing.T) {
	values := map[string][]byte{
		"super":  EncodeSuperblock(&Superblock{Format: 1, BlockSize: 4096}),
		"inode":  EncodeInode(&Inode{Ino: 1}),
		"dirent": EncodeDirent(Dirent{Ino: 1}),
		"extent": EncodeExtent(Extent{DevBlock: 1, Len: 1, State: Written}),
		"free":   EncodeFree(1),
	}
	decode := map[string]func([]byte) error{
		"super":  func(v []byte) error { _, err := DecodeSuperblock(v); return err },
		"inode":  func(v []byte) error { _, err := DecodeInode(v); return err },
		"dirent": func(v []byte) error { _, err := DecodeDirent(v); return err },
		"extent": func(v []byte) error { _, _, err := DecodeExtent(ExtentKey(1, 0), v); return err },
		"free":   func(v []byte) error { _, _, err := DecodeFree(FreeKey(1), v); return err },
	}
	for kind, v := range values {
		for bit := 0; bit < len(v)*8; bit++ {
			c := bytes.Clone(v)
			c[bit/8] ^= 1 << (bit % 8)
			if err := decode[kind](c); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s bit %d: err = %v, want ErrCorrupt", kind, bit, err)
			}
		}
		for n := 0; n < len(v); n++ {
			if err := decode[kind](v[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s truncated to %d: err = %v", kind, n, err)
			}
		}
	}
}

func TestPebbleKV(t *testing.T) {
	fs := vfs.NewCrashableMem()
	kv, err := OpenPebble("db", PebbleOptions{FS: fs, CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	tx := kv.NewTxn()
	for i := range 10 {
		tx.Set(InodeKey(Ino(i+1)), EncodeInode(&Inode{Ino: Ino(i + 1)}))
	}
	tx.Delete(InodeKey(3))
	if _, err := tx.Get(InodeKey(3)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("txn read-your-delete: %v", err)
	}
	if _, err := tx.Get(InodeKey(4)); err != nil {
		t.Fatalf("txn read-your-write: %v", err)
	}
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	var seen []Ino
	start, end := InodeKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		in, err := DecodeInode(v)
		seen = append(seen, in.Ino)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "[1 2 4 5 6 7 8 9 10]" {
		t.Fatalf("scan = %v", seen)
	}
	if err := kv.Sync(); err != nil {
		t.Fatal(err)
	}
	// An unsynced commit after the Sync may be lost by a crash; the synced
	// ones may not.
	tx = kv.NewTxn()
	tx.Set(InodeKey(99), EncodeInode(&Inode{Ino: 99}))
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	kv2, err := OpenPebble("db", PebbleOptions{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer kv2.Close()
	if _, err := kv2.Get(InodeKey(10)); err != nil {
		t.Fatalf("synced record lost: %v", err)
	}
	if _, err := kv2.Get(InodeKey(99)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unsynced record after a zero-keep crash: %v", err)
	}
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPebble("missing", PebbleOptions{FS: fs}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("opening a missing database: %v", err)
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder: none may panic, and a
// value that decodes must re-encode to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(byte(0), EncodeSuperblock(&Superblock{Format: 1}))
	f.Add(byte(1), EncodeInode(&Inode{Ino: 3, Size: 9}))
	f.Add(byte(2), EncodeDirent(Dirent{Ino: 2}))
	f.Add(byte(3), EncodeExtent(Extent{DevBlock: 4, Len: 2, State: Written}))
	f.Add(byte(4), EncodeFree(8))
	f.Add(byte(5), EncodeBytes([]byte("x")))
	f.Fuzz(func(t *testing.T, kind byte, v []byte) {
		switch kind % 6 {
		case 0:
			if s, err := DecodeSuperblock(v); err == nil && !bytes.Equal(EncodeSuperblock(s), v) {
				t.Fatal("superblock does not re-encode")
			}
		case 1:
			if in, err := DecodeInode(v); err == nil && !bytes.Equal(EncodeInode(in), v) {
				t.Fatal("inode does not re-encode")
			}
		case 2:
			if d, err := DecodeDirent(v); err == nil && !bytes.Equal(EncodeDirent(d), v) {
				t.Fatal("dirent does not re-encode")
			}
		case 3:
			if _, e, err := DecodeExtent(ExtentKey(1, 0), v); err == nil && !bytes.Equal(EncodeExtent(e), v) {
				t.Fatal("extent does not re-encode")
			}
		case 4:
			if _, n, err := DecodeFree(FreeKey(0), v); err == nil && !bytes.Equal(EncodeFree(n), v) {
				t.Fatal("free does not re-encode")
			}
		case 5:
			if p, err := DecodeBytes("x", v); err == nil && !bytes.Equal(EncodeBytes(p), v) {
				t.Fatal("bytes do not re-encode")
			}
		}
	})
}

// FuzzKeys checks key parsers never panic on arbitrary keys.
func FuzzKeys(f *testing.F) {
	f.Add(DirentKey(1, "name"))
	f.Add(OrphanKey(4))
	f.Add(ExtentKey(2, 3))
	f.Fuzz(func(t *testing.T, k []byte) {
		_, _, _ = DirentName(k)
		_, _ = OrphanIno(k)
		_, _, _ = DecodeExtent(k, EncodeExtent(Extent{DevBlock: 1, Len: 1, State: Written}))
		_, _, _ = DecodeFree(k, EncodeFree(1))
	})
}

// TestSnapshot: a snapshot keeps showing the state of its creation while
// later commits change and delete keys.
func TestSnapshot(t *testing.T) {
	kv, err := OpenPebble("db", PebbleOptions{FS: vfs.NewMem(), CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	tx := kv.NewTxn()
	tx.Set([]byte("a"), []byte("1"))
	tx.Set([]byte("b"), []byte("2"))
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	snap := kv.Snapshot()
	defer snap.Close()
	tx = kv.NewTxn()
	tx.Delete([]byte("a"))
	tx.Set([]byte("b"), []byte("3"))
	tx.Set([]byte("c"), []byte("4"))
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	if v, err := snap.Get([]byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("snapshot Get(a) = %q, %v; want 1", v, err)
	}
	var seen []string
	if err := snap.Scan([]byte("a"), []byte("z"), func(k, v []byte) error {
		seen = append(seen, string(k)+"="+string(v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, " "); got != "a=1 b=2" {
		t.Fatalf("snapshot scan %q, want \"a=1 b=2\"", got)
	}
	if _, err := kv.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("live Get(a) after delete: %v", err)
	}
}
