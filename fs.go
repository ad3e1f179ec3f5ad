package sluice

import (
	"errors"
	"fmt"
	"github.com/sluicefs/sluice/checksum"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/alloc"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/internal/lockrank"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/pagecache"
	"github.com/sluicefs/sluice/refcount"
	"github.com/sluicefs/sluice/volume"
)

// FS is an open sluice file system. All its methods are safe for concurrent
// use.
type FS struct {
	// Immutable after open.
	opts       Options
	policy     Policy
	vol        *volume.Volume // vol.Dev is the raw device: never used for I/O (use dev)
	ownsVolume bool
	dev        *countingDevice // the one handle for data I/O; counts every request
	kv         meta.KV
	blockSize  int64
	blockShift uint
	ioUnit     int64
	dataStart  uint64
	devBlocks  uint64
	alloc      *alloc.Allocator
	// shared is the shared-block table (reflink) and the copy-on-write
	// staging set; cow holds staging blocks allocated ahead (cow.go).
	shared *refcount.Table
	cow    cowPool
	// sums is the data checksum table, nil on a volume without data
	// checksums (sums.go); sumReported holds the device blocks whose
	// mismatch was logged.
	sums        *checksum.Table
	sumReported sync.Map
	sumFlushing atomic.Bool    // a transaction for the checksums alone is running (setSums)
	sumFlush    sync.WaitGroup // that transaction's goroutine, which Close waits for
	cache       *pagecache.Cache

	// ns serialises namespace changes (create, link, unlink, rename, ...)
	// and lets lookups run in parallel with each other. Directory entries
	// live only in the metadata; ns is what keeps a path walk consistent.
	ns lockrank.RWMutex[lockrank.Namespace]

	// commitMu serialises metadata transactions: allocator changes and the
	// KV commit happen in one critical section, so commits apply in the
	// order their allocator journals were taken.
	commitMu lockrank.Mutex[lockrank.Commit]
	commit   struct {
		// Protected by commitMu.
		seq     uint64   // number of the last committed transaction
		nextIno meta.Ino // next inode number to hand out
	}
	// committedSeq is commit.seq, readable without commitMu; syncedSeq is
	// the last transaction a metadata sync made durable (every earlier
	// one is too).
	committedSeq, syncedSeq atomic.Uint64
	// shutdown holds the error that stopped the file system, or nil.
	shutdown atomic.Pointer[error]

	icache struct {
		mu lockrank.Mutex[lockrank.ICache]
		// m holds every in-core inode. Protected by mu.
		m map[meta.Ino]*inode
		// retainedDirs counts the directories maybeEvict kept in m
		// unreferenced (inode.retained), at most maxRetainedDirs.
		// Protected by mu.
		retainedDirs int
	}

	dirty struct {
		mu lockrank.Mutex[lockrank.Leaf]
		// set holds inodes whose in-core state is ahead of the metadata:
		// unpersisted attributes, or written extents not yet known
		// durable. Protected by mu.
		set map[*inode]struct{}
	}

	// convEpoch stamps unwritten-to-written conversions; a sync point that
	// reads E and then flushes the device makes every conversion stamped
	// <= E durable.
	convEpoch atomic.Uint64
	group     groupSync

	// writebacks counts block writebacks in flight, so SyncAll and Close
	// wait for those the flusher started.
	writebacks inflight

	counters Counters

	files struct {
		mu lockrank.Mutex[lockrank.Leaf]
		// set holds every open File, so Close can close them. Protected
		// by mu.
		set map[*File]struct{}
	}

	// hooks are test knobs, set before the file system is used and never
	// changed after; nil in production.
	hooks struct {
		// persistLocked runs in persist with the inode's mu held.
		persistLocked func(*inode)
		// evictStart runs when maybeEvict starts, before it locks.
		evictStart func(*inode)
		// pageWritten runs in writePage, the page still locked, once a
		// buffered write has copied into it.
		pageWritten func(*inode, *pagecache.Page)
	}

	closeOnce sync.Once
	closing   chan struct{}
	bg        sync.WaitGroup
}

// Open opens the volume directory dir.
func Open(dir string, opts *Options) (*FS, error) {
	opts = opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: opts.ReadOnly, Device: opts.Device})
	if err != nil {
		return nil, err
	}
	fs, err := OpenVolume(v, opts)
	if err != nil {
		v.Close()
		return nil, err
	}
	fs.ownsVolume = true
	return fs, nil
}

// OpenVolume starts a file system on an attached volume (tests use it with
// memory devices and an in-memory Pebble). The volume stays the caller's:
// Close does not close it.
func OpenVolume(v *volume.Volume, opts *Options) (*FS, error) {
	o := *opts.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	pol := *o.Policy
	o.Policy = &pol
	if do, ok := v.DeviceOptions(); ok {
		o.Device = do // as the volume opened it: its I/O unit, defaults filled
	}
	h := v.Header
	fs := &FS{
		opts:      o,
		policy:    pol,
		vol:       v,
		kv:        v.KV,
		blockSize: int64(h.BlockSize),
		ioUnit:    int64(h.IOUnit),
		dataStart: h.DataStart,
		devBlocks: h.DeviceBytes / uint64(h.BlockSize),
		closing:   make(chan struct{}),
	}
	fs.dev = &countingDevice{Device: v.Dev, c: &fs.counters}
	fs.convEpoch.Store(1)
	for fs.blockSize>>fs.blockShift > 1 {
		fs.blockShift++
	}
	fs.icache.m = map[meta.Ino]*inode{}
	fs.files.set = map[*File]struct{}{}
	fs.dirty.set = map[*inode]struct{}{}
	fs.commit.nextIno = v.Super.NextIno
	fs.group.init(fs.syncPoint, o.NoGroupCommit)
	if err := fs.loadAllocator(); err != nil {
		return nil, err
	}
	if err := fs.loadSums(); err != nil {
		return nil, err
	}
	fs.cache = pagecache.New(pagecache.Options{
		CapacityBytes: o.CacheSizeBytes,
		PageSize:      int(min(fs.blockSize, 4096)),
		DirtyRatio:    o.DirtyRatio,
	})
	if !o.ReadOnly {
		if err := fs.recoverStaging(); err != nil {
			return nil, fmt.Errorf("freeing copy-on-write staging blocks: %w", err)
		}
		if err := fs.recoverOrphans(); err != nil {
			return nil, err
		}
		// What the store shows may be what a crashed predecessor
		// committed without syncing: synced now, every record is durable
		// (syncedSeq 0 covers them all; see inode.metaSeq).
		if err := fs.kv.Sync(); err != nil {
			return nil, fmt.Errorf("syncing metadata: %w", err)
		}
	}
	fs.bg.Add(2)
	go fs.backgroundSyncer()
	go fs.flusher()
	return fs, nil
}

func (fs *FS) loadAllocator() error {
	var free []alloc.Extent
	start, end := meta.FreeKeyRange()
	err := fs.kv.Scan(start, end, func(k, v []byte) error {
		s, n, err := meta.DecodeFree(k, v)
		if err != nil {
			return err
		}
		free = append(free, alloc.Extent{Start: alloc.BlockNum(s), Len: n})
		return nil
	})
	if err != nil {
		return fmt.Errorf("loading free space: %w", err)
	}
	a, err := alloc.Load(alloc.BlockNum(fs.dataStart), alloc.BlockNum(fs.devBlocks), free)
	if err != nil {
		return fmt.Errorf("loading free space: %w", err)
	}
	fs.alloc = a
	var shared []refcount.Run
	start, end = meta.SharedKeyRange()
	err = fs.kv.Scan(start, end, func(k, v []byte) error {
		s, n, refs, err := meta.DecodeShared(k, v)
		shared = append(shared, refcount.Run{Start: s, Len: n, Refs: refs})
		return err
	})
	if err != nil {
		return fmt.Errorf("loading shared blocks: %w", err)
	}
	var staged []refcount.Range
	start, end = meta.StagedKeyRange()
	err = fs.kv.Scan(start, end, func(k, v []byte) error {
		s, n, err := meta.DecodeStaged(k, v)
		staged = append(staged, refcount.Range{Start: s, Len: n})
		return err
	})
	if err != nil {
		return fmt.Errorf("loading copy-on-write staging blocks: %w", err)
	}
	if fs.shared, err = refcount.Load(shared, staged); err != nil {
		return fmt.Errorf("loading shared blocks: %w", err)
	}
	return nil
}

// Close writes back dirty data, makes everything durable and closes the
// volume if Open opened it. Files still open are closed.
func (fs *FS) Close() error {
	var err error
	fs.closeOnce.Do(func() {
		// Close open files first: each waits for its calls in progress
		// (and their device I/O) to finish.
		fs.files.mu.Lock()
		open := make([]*File, 0, len(fs.files.set))
		for f := range fs.files.set {
			open = append(open, f)
		}
		fs.files.mu.Unlock()
		for _, f := range open {
			f.Close()
		}
		// Stop the flusher and the syncer, then write back what is left
		// (SyncAll also waits for writebacks the flusher started).
		close(fs.closing)
		fs.bg.Wait()
		if !fs.opts.ReadOnly && fs.shutdownErr() == nil {
			err = errors.Join(fs.releaseStaging(), fs.SyncAll())
		} else {
			fs.writebacks.wait()
		}
		fs.sumFlush.Wait() // no write is left to start another
		fs.cache.Close()
		if fs.ownsVolume {
			err = errors.Join(err, fs.vol.Close())
		}
	})
	return err
}

// SyncAll writes back every dirty page and makes every completed write and
// every metadata change durable (sync(2) for this file system).
func (fs *FS) SyncAll() error {
	if err := fs.writebackAll(); err != nil {
		return err
	}
	fs.writebacks.wait()
	return fs.group.sync()
}

func (fs *FS) backgroundSyncer() {
	defer fs.bg.Done()
	t := time.NewTicker(fs.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-fs.closing:
			return
		case <-t.C:
			if fs.opts.ReadOnly || fs.shutdownErr() != nil {
				continue
			}
			_ = fs.SyncAll()
		}
	}
}

// Shutdown stops the file system at once, for a cause found outside it (a
// volume whose ownership was lost: its metadata commits and data writes
// are refused anyway, and the engine must not try them): every later
// change fails with EIO wrapping ErrShutdown and cause, and Close writes
// nothing back. What was not durable stays as the last sync point left it.
func (fs *FS) Shutdown(cause error) { _ = fs.shutdownWith(cause) }

// shutdownErr returns the error that shut the file system down, or nil.
func (fs *FS) shutdownErr() error {
	if p := fs.shutdown.Load(); p != nil {
		return *p
	}
	return nil
}

// writable returns EROFS for a read-only file system, the shutdown error
// after a shutdown, and nil otherwise.
func (fs *FS) writable() error {
	if fs.opts.ReadOnly {
		return syscall.EROFS
	}
	if err := fs.shutdownErr(); err != nil {
		return err
	}
	return nil
}

// Policy returns the policy the file system runs with.
func (fs *FS) Policy() Policy { return fs.policy }

// Options returns the options the file system runs with, defaults filled;
// Device is the data device's own options when it is a directdev device.
func (fs *FS) Options() Options { return fs.opts }

// BlockSize returns the file-system block size in bytes.
func (fs *FS) BlockSize() int { return int(fs.blockSize) }

// IOUnit returns the data device's I/O unit: the alignment O_DIRECT I/O
// needs (offset, length and buffer address).
func (fs *FS) IOUnit() int { return int(fs.ioUnit) }

// Device returns the data device, as the engine sees it (with counters).
func (fs *FS) Device() device.Device { return fs.dev }
