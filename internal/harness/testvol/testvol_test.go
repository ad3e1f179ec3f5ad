package testvol

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/meta"
)

// TestFormat: the volume has the geometry asked for, and defaults fill the
// rest.
func TestFormat(t *testing.T) {
	for _, c := range []struct {
		cfg               Config
		deviceBytes       int64
		ioUnit, blockSize int
	}{
		{Config{}, 64 << 20, 512, 4096},
		{Config{DeviceBytes: 8 << 20, IOUnit: 4096, BlockSize: 16384, NotCrashable: true}, 8 << 20, 4096, 16384},
	} {
		d, err := Format(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		v, err := d.Attach()
		if err != nil {
			t.Fatal(err)
		}
		if d.Mem.Size() != c.deviceBytes || d.Mem.IOUnit() != c.ioUnit || int(v.Header.BlockSize) != c.blockSize {
			t.Errorf("%+v: device %d bytes, I/O unit %d, block size %d; want %d, %d, %d",
				c.cfg, d.Mem.Size(), d.Mem.IOUnit(), v.Header.BlockSize, c.deviceBytes, c.ioUnit, c.blockSize)
		}
		v.KV.Close()
		d.Mem.Close()
	}
}

// TestCrashAndCopy: a crash keeps what was flushed and synced and may lose
// the rest; a copy keeps everything written; neither changes the original.
func TestCrashAndCopy(t *testing.T) {
	d, err := Format(Config{DeviceBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := d.OpenKV()
	if err != nil {
		t.Fatal(err)
	}
	put := func(k string, sync bool) {
		tx := kv.NewTxn()
		tx.Set([]byte(k), []byte("v"))
		if err := tx.Commit(sync); err != nil {
			t.Fatal(err)
		}
	}
	put("zsynced", true)
	put("zunsynced", false)
	synced, unflushed := bytes.Repeat([]byte{1}, 4096), bytes.Repeat([]byte{2}, 4096)
	write := func(b []byte, off int64) {
		buf := device.AlignedBuf(len(b))
		copy(buf, b)
		if err := device.WriteAt(d.Mem, buf, off); err != nil {
			t.Fatal(err)
		}
	}
	write(synced, 1<<20)
	if err := device.Flush(d.Mem); err != nil {
		t.Fatal(err)
	}
	write(unflushed, 2<<20)

	has := func(c *Disks, k string) bool {
		t.Helper()
		kv, err := c.OpenKV()
		if err != nil {
			t.Fatal(err)
		}
		defer kv.Close()
		_, err = kv.Get([]byte(k))
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	read := func(c *Disks, off int64) []byte {
		t.Helper()
		buf := device.AlignedBuf(4096)
		if err := device.ReadAt(c.Mem, buf, off); err != nil {
			t.Fatal(err)
		}
		return buf
	}

	for seed := uint64(0); seed < 8; seed++ {
		c := d.Crash(seed)
		if !has(c, "zsynced") || !bytes.Equal(read(c, 1<<20), synced) {
			t.Errorf("Crash(%d) lost synced metadata or flushed data", seed)
		}
	}
	// Closing Pebble writes its log out (without syncing it): a copy keeps
	// that too, and the unflushed device write.
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
	cp := d.Copy()
	if !has(cp, "zsynced") || !has(cp, "zunsynced") || !bytes.Equal(read(cp, 1<<20), synced) || !bytes.Equal(read(cp, 2<<20), unflushed) {
		t.Errorf("Copy lost something")
	}
	if !has(d, "zunsynced") {
		t.Errorf("the original lost a commit")
	}
}
