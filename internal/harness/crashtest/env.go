package crashtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/volume"
)

// EnvConfig describes the volume a case runs on.
type EnvConfig struct {
	// DeviceBytes is the size of the memory device. The default value is
	// 32 MiB.
	DeviceBytes int64
	// BlockSize is the file-system block size. The default value is 4096.
	BlockSize int
	// IOUnit is the memory device's I/O unit (O_DIRECT alignment). The
	// default value is 512.
	IOUnit int
	// Options are the engine's options. SyncInterval and WritebackAge
	// default to an hour, so that no background sync or writeback runs
	// during a case: durability comes only from the workload's own syncs,
	// which is what the model follows.
	Options sluice.Options
	// DataChecksums formats the volume with data checksums (blocks of
	// at most 4 KiB). The default value is false.
	DataChecksums bool
	// Etcd, when set, keeps the metadata in etcd (EtcdRecKV), each
	// volume under a prefix of its own, instead of in Pebble on a
	// crashable in-memory FS (RecKV). The default value is nil: Pebble.
	Etcd *EtcdMeta
	// lyingFlush makes the device acknowledge flushes without flushing
	// (the harness's self-test).
	lyingFlush bool
}

func (c *EnvConfig) ensureDefaults() {
	if c.DeviceBytes == 0 {
		c.DeviceBytes = 32 << 20
	}
	if c.BlockSize == 0 {
		c.BlockSize = 4096
	}
	if c.IOUnit == 0 {
		c.IOUnit = 512
	}
	if c.Options.SyncInterval == 0 {
		c.Options.SyncInterval = time.Hour
	}
	if c.Options.WritebackAge == 0 {
		c.Options.WritebackAge = time.Hour
	}
	if c.Options.Logf == nil {
		c.Options.Logf = func(string, ...any) {} // mismatches are counted and checked instead
	}
}

// Env is a sluice file system on a crashable stack:
//
//	sluice.FS -> faultdev (injectors, gates) -> flush fence -> memdev
//	          -> RecKV -> Pebble -> vfs.NewCrashableMem
//	          or EtcdRecKV -> etcdkv, owned -> etcd cluster (EnvConfig.Etcd)
//
// Crash copies the memdev and the metadata as a power failure at that
// instant could leave them; Open starts a file system on such a copy.
type Env struct {
	Mem   *memdev.Device
	Fault *faultdev.Device
	// MemFS holds Pebble's files (nil on etcd).
	MemFS *vfs.MemFS
	KV    CrashKV
	Vol   *volume.Volume
	FS    *sluice.FS
	Opts  sluice.Options

	fence *flushFence
	// corruptions counts the data corruptions corruptionProbe injected:
	// the checksum mismatches the file system may have counted.
	corruptions int
}

// CrashKV is an Env's metadata store: a meta.KV that records its commits,
// so that a crash can keep the synced ones plus a chosen prefix of the
// others. RecKV keeps them in Pebble, EtcdRecKV in etcd.
type CrashKV interface {
	meta.KV
	// Commits returns the number of commits made through the KV so far
	// and the number of them known durable (the engine synced them).
	Commits() (commits, synced uint64)
	// crashPrefix returns, open, the metadata a crash now could leave if
	// the first upTo commits survived (at least the synced ones, at most
	// all of them), and the number kept.
	crashPrefix(upTo uint64) (CrashKV, uint64, error)
}

// NewEnv formats a new volume (testvol.Format, or a memory device and
// EnvConfig.Etcd) and opens a file system on it. The metadata commits that
// formatting made are synced: the KV's log starts empty.
func NewEnv(cfg EnvConfig) (*Env, error) {
	cfg.ensureDefaults()
	var mem *memdev.Device
	var memfs *vfs.MemFS
	var kv CrashKV
	if cfg.Etcd != nil {
		var err error
		if mem, kv, err = cfg.Etcd.format(cfg); err != nil {
			return nil, err
		}
	} else {
		d, err := testvol.Format(testvol.Config{DeviceBytes: cfg.DeviceBytes, IOUnit: cfg.IOUnit, BlockSize: cfg.BlockSize, DataChecksums: cfg.DataChecksums})
		if err != nil {
			return nil, err
		}
		if kv, err = openRecKV(d.MemFS); err != nil {
			return nil, err
		}
		mem, memfs = d.Mem, d.MemFS
	}
	e, _, err := attach(mem, memfs, kv, cfg.Options, false)
	if e != nil {
		e.fence.lie = cfg.lyingFlush
	}
	return e, err
}

// attach starts a file system on mem and kv; with check, it first checks
// the volume as found (before orphan recovery) and returns the report.
func attach(mem *memdev.Device, memfs *vfs.MemFS, kv CrashKV, opts sluice.Options, check bool) (*Env, *sluice.CheckReport, error) {
	fence := &flushFence{Device: mem}
	fault := faultdev.New(fence)
	v, err := volume.Attach(fault, kv)
	if err != nil {
		kv.Close()
		return nil, nil, fmt.Errorf("attaching the volume: %w", err)
	}
	var pre *sluice.CheckReport
	if check {
		pre, err = sluice.CheckVolume(v)
		if err != nil {
			kv.Close()
			return nil, nil, fmt.Errorf("checking the volume before recovery: %w", err)
		}
	}
	fs, err := sluice.OpenVolume(v, &opts)
	if err != nil {
		kv.Close()
		return nil, pre, fmt.Errorf("opening the file system: %w", err)
	}
	return &Env{Mem: mem, Fault: fault, MemFS: memfs, KV: kv, Vol: v, FS: fs, Opts: opts, fence: fence}, pre, nil
}

// Close closes the file system cleanly (it syncs) and its parts.
func (e *Env) Close() error {
	if e.FS == nil {
		return nil
	}
	err := e.FS.Close()
	err = errors.Join(err, e.KV.Close(), e.Fault.Close())
	e.FS = nil
	return err
}

// canCrashRandom reports whether the metadata can crash as
// MetaCrash.Random says (Pebble only).
func (e *Env) canCrashRandom() bool {
	_, ok := e.KV.(*RecKV)
	return ok
}

// MetaCrash says which metadata a crash keeps.
type MetaCrash struct {
	// Random, if set, keeps each unsynced 4 KiB block of the metadata
	// store's files with probability Percent% (Pebble's CrashClone). Not
	// reproducible. Pebble only (Env.canCrashRandom).
	Random  bool
	Percent int
	// Otherwise the crash keeps the synced commits plus the first UpTo
	// commits overall (at least the synced ones; at most all).
	UpTo uint64
}

func (m MetaCrash) String() string {
	if m.Random {
		return fmt.Sprintf("pebble-crashclone(%d%%)", m.Percent)
	}
	return fmt.Sprintf("prefix(%d commits)", m.UpTo)
}

// Image is what a crash left: a device and a metadata store, not yet
// opened.
type Image struct {
	Mem *memdev.Device
	// MemFS holds Pebble's files (nil on etcd).
	MemFS *vfs.MemFS
	// kv is the metadata, already open (prefix crashes), or nil.
	kv CrashKV
	// KeptCommits is the metadata prefix kept (prefix crashes only).
	KeptCommits uint64
}

// Crash returns what a power failure now could leave, the device's pending
// writes given fates by fate (nil: memdev.CrashImage(seed)) and the
// metadata by m. The file system keeps running; flushes wait while the
// copies are made.
func (e *Env) Crash(seed uint64, fate func(memdev.PendingWrite) memdev.Fate, m MetaCrash) (*Image, error) {
	e.fence.hold()
	defer e.fence.release()
	img := &Image{}
	if fate != nil {
		img.Mem = e.Mem.CrashImageWith(fate)
	} else {
		img.Mem = e.Mem.CrashImage(seed)
	}
	if m.Random {
		rk, ok := e.KV.(*RecKV)
		if !ok {
			return nil, fmt.Errorf("%v needs the metadata in Pebble, not %T", m, e.KV)
		}
		img.MemFS = rk.crashRandom(m.Percent, seed)
		return img, nil
	}
	kv, kept, err := e.KV.crashPrefix(m.UpTo)
	if err != nil {
		return nil, err
	}
	img.kv, img.KeptCommits = kv, kept
	if rk, ok := kv.(*RecKV); ok {
		img.MemFS = rk.fs
	}
	return img, nil
}

// Open starts a file system on the image, with orphan recovery, and returns
// the Check report of the volume as found (before recovery).
func (img *Image) Open(opts sluice.Options) (*Env, *sluice.CheckReport, error) {
	kv := img.kv
	if kv == nil {
		rk, err := openRecKV(img.MemFS)
		if err != nil {
			return nil, nil, fmt.Errorf("reopening the metadata: %w", err)
		}
		kv = rk
	}
	img.kv = nil
	return attach(img.Mem, img.MemFS, kv, opts, true)
}

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }
