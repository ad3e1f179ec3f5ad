package meta_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/meta/kvtest"
)

func TestRoundTrip(t *testing.T) {
	sb := &meta.Superblock{Format: meta.FormatVersion, UUID: [16]byte{1, 2, 3}, BlockSize: 4096, SectorSize: 512, DeviceBytes: 1 << 30, DataStart: 1, NextIno: 7}
	got, err := meta.DecodeSuperblock(meta.EncodeSuperblock(sb))
	if err != nil || *got != *sb {
		t.Fatalf("superblock: %+v %v", got, err)
	}
	in := &meta.Inode{Ino: 9, Mode: 0o100644, Uid: 1, Gid: 2, Nlink: 1, Size: 12345, Atime: -1, Mtime: 2, Ctime: 3, Gen: 4}
	gi, err := meta.DecodeInode(meta.EncodeInode(in))
	if err != nil || *gi != *in {
		t.Fatalf("inode: %+v %v", gi, err)
	}
	d := meta.Dirent{Ino: 5, Type: 0o040000}
	gd, err := meta.DecodeDirent(meta.EncodeDirent(d))
	if err != nil || gd != d {
		t.Fatalf("dirent: %+v %v", gd, err)
	}
	e := meta.Extent{FileBlock: 10, DevBlock: 100, Len: 3, State: meta.Unwritten}
	ino, ge, err := meta.DecodeExtent(meta.ExtentKey(9, 10), meta.EncodeExtent(e))
	if err != nil || ge != e || ino != 9 {
		t.Fatalf("extent: %v %+v %v", ino, ge, err)
	}
	s, n, err := meta.DecodeFree(meta.FreeKey(77), meta.EncodeFree(5))
	if err != nil || s != 77 || n != 5 {
		t.Fatalf("free: %d %d %v", s, n, err)
	}
	s, n, refs, err := meta.DecodeShared(meta.SharedKey(12), meta.EncodeShared(4, 3))
	if err != nil || s != 12 || n != 4 || refs != 3 {
		t.Fatalf("shared: %d %d %d %v", s, n, refs, err)
	}
	s, n, err = meta.DecodeStaged(meta.StagedKey(40), meta.EncodeStaged(6))
	if err != nil || s != 40 || n != 6 {
		t.Fatalf("staged: %d %d %v", s, n, err)
	}
	b, err := meta.DecodeBytes("x", meta.EncodeBytes([]byte("target")))
	if err != nil || string(b) != "target" {
		t.Fatalf("bytes: %q %v", b, err)
	}
	p, name, err := meta.DirentName(meta.DirentKey(3, "a/b"))
	if err != nil || p != 3 || name != "a/b" {
		t.Fatalf("dirent name: %v %q %v", p, name, err)
	}
}

// TestCorruptionDetected flips every bit of every record kind and checks the
// decoder reports ErrCorrupt (the CRC catches single-bit flips).
func TestCorruptionDetected(t *testing.T) {
	values := map[string][]byte{
		"super":  meta.EncodeSuperblock(&meta.Superblock{Format: 1, BlockSize: 4096}),
		"inode":  meta.EncodeInode(&meta.Inode{Ino: 1}),
		"dirent": meta.EncodeDirent(meta.Dirent{Ino: 1}),
		"extent": meta.EncodeExtent(meta.Extent{DevBlock: 1, Len: 1, State: meta.Written}),
		"free":   meta.EncodeFree(1),
		"shared": meta.EncodeShared(1, 2),
		"staged": meta.EncodeStaged(1),
	}
	decode := map[string]func([]byte) error{
		"super":  func(v []byte) error { _, err := meta.DecodeSuperblock(v); return err },
		"inode":  func(v []byte) error { _, err := meta.DecodeInode(v); return err },
		"dirent": func(v []byte) error { _, err := meta.DecodeDirent(v); return err },
		"extent": func(v []byte) error { _, _, err := meta.DecodeExtent(meta.ExtentKey(1, 0), v); return err },
		"free":   func(v []byte) error { _, _, err := meta.DecodeFree(meta.FreeKey(1), v); return err },
		"shared": func(v []byte) error { _, _, _, err := meta.DecodeShared(meta.SharedKey(1), v); return err },
		"staged": func(v []byte) error { _, _, err := meta.DecodeStaged(meta.StagedKey(1), v); return err },
	}
	for kind, v := range values {
		for bit := 0; bit < len(v)*8; bit++ {
			c := bytes.Clone(v)
			c[bit/8] ^= 1 << (bit % 8)
			if err := decode[kind](c); !errors.Is(err, meta.ErrCorrupt) {
				t.Fatalf("%s bit %d: err = %v, want ErrCorrupt", kind, bit, err)
			}
		}
		for n := 0; n < len(v); n++ {
			if err := decode[kind](v[:n]); !errors.Is(err, meta.ErrCorrupt) {
				t.Fatalf("%s truncated to %d: err = %v", kind, n, err)
			}
		}
	}
}

// TestPebbleKV runs the KV conformance suite against Pebble.
func TestPebbleKV(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) meta.KV {
		kv, err := meta.OpenPebble("db", meta.PebbleOptions{FS: vfs.NewMem(), CreateIfMissing: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := kv.Close(); err != nil {
				t.Error(err)
			}
		})
		return kv
	})
}

// TestPebbleDurability: a crash keeps what Sync made durable and may lose
// what was committed after it; opening a missing database is ErrNotFound.
func TestPebbleDurability(t *testing.T) {
	fs := vfs.NewCrashableMem()
	kv, err := meta.OpenPebble("db", meta.PebbleOptions{FS: fs, CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	tx := kv.NewTxn()
	for i := range 10 {
		tx.Set(meta.InodeKey(meta.Ino(i+1)), meta.EncodeInode(&meta.Inode{Ino: meta.Ino(i + 1)}))
	}
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	if err := kv.Sync(); err != nil {
		t.Fatal(err)
	}
	// An unsynced commit after the Sync may be lost by a crash; the synced
	// ones may not.
	tx = kv.NewTxn()
	tx.Set(meta.InodeKey(99), meta.EncodeInode(&meta.Inode{Ino: 99}))
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	kv2, err := meta.OpenPebble("db", meta.PebbleOptions{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer kv2.Close()
	if _, err := kv2.Get(meta.InodeKey(10)); err != nil {
		t.Fatalf("synced record lost: %v", err)
	}
	if _, err := kv2.Get(meta.InodeKey(99)); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("unsynced record after a zero-keep crash: %v", err)
	}
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := meta.OpenPebble("missing", meta.PebbleOptions{FS: fs}); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("opening a missing database: %v", err)
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder: none may panic, and a
// value that decodes must re-encode to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(byte(0), meta.EncodeSuperblock(&meta.Superblock{Format: 1}))
	f.Add(byte(1), meta.EncodeInode(&meta.Inode{Ino: 3, Size: 9}))
	f.Add(byte(2), meta.EncodeDirent(meta.Dirent{Ino: 2}))
	f.Add(byte(3), meta.EncodeExtent(meta.Extent{DevBlock: 4, Len: 2, State: meta.Written}))
	f.Add(byte(4), meta.EncodeFree(8))
	f.Add(byte(5), meta.EncodeBytes([]byte("x")))
	f.Fuzz(func(t *testing.T, kind byte, v []byte) {
		switch kind % 6 {
		case 0:
			if s, err := meta.DecodeSuperblock(v); err == nil && !bytes.Equal(meta.EncodeSuperblock(s), v) {
				t.Fatal("superblock does not re-encode")
			}
		case 1:
			if in, err := meta.DecodeInode(v); err == nil && !bytes.Equal(meta.EncodeInode(in), v) {
				t.Fatal("inode does not re-encode")
			}
		case 2:
			if d, err := meta.DecodeDirent(v); err == nil && !bytes.Equal(meta.EncodeDirent(d), v) {
				t.Fatal("dirent does not re-encode")
			}
		case 3:
			if _, e, err := meta.DecodeExtent(meta.ExtentKey(1, 0), v); err == nil && !bytes.Equal(meta.EncodeExtent(e), v) {
				t.Fatal("extent does not re-encode")
			}
		case 4:
			if _, n, err := meta.DecodeFree(meta.FreeKey(0), v); err == nil && !bytes.Equal(meta.EncodeFree(n), v) {
				t.Fatal("free does not re-encode")
			}
		case 5:
			if p, err := meta.DecodeBytes("x", v); err == nil && !bytes.Equal(meta.EncodeBytes(p), v) {
				t.Fatal("bytes do not re-encode")
			}
		}
	})
}

// FuzzKeys checks key parsers never panic on arbitrary keys.
func FuzzKeys(f *testing.F) {
	f.Add(meta.DirentKey(1, "name"))
	f.Add(meta.OrphanKey(4))
	f.Add(meta.ExtentKey(2, 3))
	f.Fuzz(func(t *testing.T, k []byte) {
		_, _, _ = meta.DirentName(k)
		_, _ = meta.OrphanIno(k)
		_, _, _ = meta.DecodeExtent(k, meta.EncodeExtent(meta.Extent{DevBlock: 1, Len: 1, State: meta.Written}))
		_, _, _ = meta.DecodeFree(k, meta.EncodeFree(1))
	})
}
