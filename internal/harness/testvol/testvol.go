// Package testvol builds the volume every sluice test runs on: a memory data
// device (memdev) and a Pebble metadata store on an in-memory FS, formatted
// with the geometry a test asks for, and the copies of both that a crash or
// a clean shutdown leaves, ready to be opened again.
//
// It stops below the engine: it returns a device and a metadata store, and
// each test environment wraps them (faultdev, a recording or failing KV) and
// opens the engine itself. It must not import package sluice, whose own
// tests import it.
//
// Disks is not safe for concurrent use; the devices it holds are (memdev and
// vfs.MemFS are). A crash copy is taken while the file system may still be
// running: what it holds is what a power failure at that instant could
// leave.
package testvol

import (
	"fmt"
	"math/rand/v2"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/volume"
)

// MetaDir is the metadata store's directory in the in-memory FS.
const MetaDir = "meta"

// Config describes the volume Format makes.
type Config struct {
	// DeviceBytes is the size of the (sparse) memory data device. The
	// default value is 64 MiB.
	DeviceBytes int64
	// IOUnit is the data device's I/O unit (memdev.Options.IOUnit): the
	// alignment O_DIRECT needs. The default value is 512.
	IOUnit int
	// BlockSize is the file-system block size
	// (volume.FormatOptions.BlockSize). The default value is 4096.
	BlockSize int
	// NotCrashable puts the metadata on Pebble's plain in-memory FS
	// (vfs.NewMem), which does not keep synced and unsynced data apart:
	// a sync costs nothing, and Crash and Copy panic. For tests that
	// never crash (a crashable FS copies a whole file at each sync). The
	// default value is false: vfs.NewCrashableMem.
	NotCrashable bool
	// DataChecksums formats the volume with data checksums
	// (volume.FormatOptions.DataChecksums). The default value is false.
	DataChecksums bool
}

// EnsureDefaults fills in the default of every zero field.
func (c *Config) EnsureDefaults() {
	if c.DeviceBytes == 0 {
		c.DeviceBytes = 64 << 20
	}
	if c.IOUnit == 0 {
		c.IOUnit = 512
	}
	if c.BlockSize == 0 {
		c.BlockSize = volume.DefaultBlockSize
	}
}

// Disks is a volume on memory: a data device and the in-memory FS the
// metadata store keeps its files in.
type Disks struct {
	// Mem is the data device. Closing it is the caller's business (or
	// that of the wrapper it hands it to).
	Mem *memdev.Device
	// MemFS holds the metadata store's files, under MetaDir.
	MemFS *vfs.MemFS
}

// Format makes a memory device and an in-memory metadata FS as cfg says
// and formats a volume on them. The metadata store is closed again: open
// it with OpenKV.
func Format(cfg Config) (*Disks, error) {
	cfg.EnsureDefaults()
	mem, err := memdev.New(cfg.DeviceBytes, memdev.Options{IOUnit: cfg.IOUnit})
	if err != nil {
		return nil, err
	}
	memfs := vfs.NewCrashableMem()
	if cfg.NotCrashable {
		memfs = vfs.NewMem()
	}
	kv, err := meta.OpenPebble(MetaDir, meta.PebbleOptions{FS: memfs, CreateIfMissing: true})
	if err != nil {
		mem.Close()
		return nil, err
	}
	if _, err := volume.Format(mem, kv, volume.FormatOptions{BlockSize: cfg.BlockSize, DataChecksums: cfg.DataChecksums}); err != nil {
		kv.Close()
		mem.Close()
		return nil, fmt.Errorf("formatting: %w", err)
	}
	if err := kv.Close(); err != nil {
		mem.Close()
		return nil, err
	}
	return &Disks{Mem: mem, MemFS: memfs}, nil
}

// OpenKV opens the metadata store held by d.MemFS.
func (d *Disks) OpenKV() (meta.KV, error) {
	return meta.OpenPebble(MetaDir, meta.PebbleOptions{FS: d.MemFS})
}

// Attach opens the metadata store and attaches the volume on d.Mem, with
// no wrapper in between: to check a volume without mounting it, or to run
// a file system on it directly. On error it closes what it opened.
func (d *Disks) Attach() (*volume.Volume, error) {
	kv, err := d.OpenKV()
	if err != nil {
		return nil, err
	}
	v, err := volume.Attach(d.Mem, kv)
	if err != nil {
		kv.Close()
		return nil, err
	}
	return v, nil
}

// Crash returns what a power failure now could leave, chosen by seed: the
// device as memdev.CrashImage(seed) leaves it (each write not yet flushed
// kept, dropped or torn) and the metadata FS with what was synced plus a
// seeded share (0-100%) of the unsynced data (vfs.MemFS.CrashClone; Pebble
// iterates a map there, so the same seed may keep different blocks).
func (d *Disks) Crash(seed uint64) *Disks {
	rng := rand.New(rand.NewPCG(seed, 7))
	return d.CrashWith(nil, seed, rng.IntN(101))
}

// CrashWith is Crash with the fates of the pending device writes given by
// fate (nil: memdev.CrashImage(seed)) and metaPercent% of the unsynced
// metadata blocks kept.
func (d *Disks) CrashWith(fate func(memdev.PendingWrite) memdev.Fate, seed uint64, metaPercent int) *Disks {
	var mem *memdev.Device
	if fate != nil {
		mem = d.Mem.CrashImageWith(fate)
	} else {
		mem = d.Mem.CrashImage(seed)
	}
	memfs := d.MemFS.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: metaPercent, RNG: rand.New(rand.NewPCG(seed, 9))})
	return &Disks{Mem: mem, MemFS: memfs}
}

// Copy returns a copy of everything written so far, flushed or not, synced
// or not: the disks of a file system closed cleanly, to open again on a
// cold cache (or to corrupt without touching the original).
func (d *Disks) Copy() *Disks {
	keep := func(memdev.PendingWrite) memdev.Fate { return memdev.Fate{Kind: memdev.Keep} }
	return d.CrashWith(keep, 1, 100)
}

// CountingKV is a metadata store that counts its keys: etcdkv's, shared
// between tests under prefixes of their own.
type CountingKV interface {
	meta.KV
	Count() (int64, error)
}

// FormatOn formats a volume on mem with its metadata in kv, which must hold
// no keys yet.
func FormatOn(mem *memdev.Device, kv CountingKV, blockSize int) error {
	return FormatOnWith(mem, kv, blockSize, false)
}

// FormatOnWith is FormatOn, with data checksums if dataChecksums.
func FormatOnWith(mem *memdev.Device, kv CountingKV, blockSize int, dataChecksums bool) error {
	if n, err := kv.Count(); err != nil {
		return err
	} else if n != 0 {
		return fmt.Errorf("the metadata store holds %d keys already", n)
	}
	if _, err := volume.Format(mem, kv, volume.FormatOptions{BlockSize: blockSize, DataChecksums: dataChecksums}); err != nil {
		return fmt.Errorf("formatting: %w", err)
	}
	return nil
}
