package sluice

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicefs/sluice/volume"
)

// Policy switches each of the five seed optimisations, and the two that go
// beyond the kernel's locks, on or off, so that its effect can be measured
// side by side. Concurrent() turns every one on (the default); Seeds()
// turns on the five seeds only, as today's XFS does them; Classic() turns
// every one off and reproduces the kernels before each fix. Which I/O lock mode each operation takes under either
// preset is tabled in one place, the iolock package doc ("Which operation
// takes which mode"), checked against the code by TestLockModes.
type Policy struct {
	// SharedDirectReads (seed 001, XFS 2011): direct reads take the I/O lock
	// shared. Off: exclusive, then demoted (the table's "direct read" row).
	SharedDirectReads bool
	// OptimisticUnalignedWrites (seed 000, XFS 2021): a sub-block direct
	// write within EOF first tries the shared lock in overwrite-only mode.
	// Off: every sub-block direct write takes the exclusive route (the
	// table's "sub-block direct write" rows).
	OptimisticUnalignedWrites bool
	// ParallelDirectWrites (seed 002, io_uring + XFS/ext4/FUSE 2023): files
	// open O_DIRECT say they take direct writes in parallel, so the async
	// ring does not serialise their punted writes per inode and the FUSE
	// mount answers FOPEN_PARALLEL_DIRECT_WRITES. Off: punted writes of one
	// inode run one at a time.
	ParallelDirectWrites bool
	// AsyncBufferedReads (seed 003, io_uring 2020): a buffered read issued
	// through the ring that meets a page under I/O arms a callback on the
	// page's unlock and is retried from the ring's completion context. Off:
	// the read is punted to a worker that blocks on the page.
	AsyncBufferedReads bool
	// SkipFullPageRMW (seed 004, pNFS 2019): a buffered write reads the old
	// page first only if the page is not up to date, no write of it is
	// pending and the write does not cover every byte of the page below
	// EOF. Off: every write to a page that is not up to date reads it first.
	SkipFullPageRMW bool

	// ParallelAppends (beyond the kernel: XFS buffered, ext4 and FUSE take
	// the exclusive lock for every append): O_APPEND and RWFAppend writes,
	// direct and buffered, reserve their range at the end of the file in a
	// short critical section under the shared I/O lock and write at the
	// same time; the size is published in reservation order once every
	// earlier reservation has completed, so a reader never sees a hole or
	// zeros inside the size. Off: every append takes the I/O lock
	// exclusive (the table's O_APPEND rows).
	ParallelAppends bool
	// BlockRangeExclusion (beyond the kernel): a sub-block direct write
	// within EOF that must allocate, convert an unwritten extent or zero
	// part of a block locks just the blocks it touches (iolock.RangeLock)
	// under the shared I/O lock, instead of seed 000's fallback (the
	// exclusive lock and a drain of every direct I/O of the file). Off:
	// the fallback.
	BlockRangeExclusion bool
}

// Concurrent returns the policy with every optimisation on.
func Concurrent() Policy {
	p := Seeds()
	p.ParallelAppends = true
	p.BlockRangeExclusion = true
	return p
}

// Seeds returns the policy with the five seed optimisations on and the two
// beyond them (ParallelAppends, BlockRangeExclusion) off: the locking of
// XFS today.
func Seeds() Policy {
	return Policy{
		SharedDirectReads:         true,
		OptimisticUnalignedWrites: true,
		ParallelDirectWrites:      true,
		AsyncBufferedReads:        true,
		SkipFullPageRMW:           true,
	}
}

// Classic returns the policy with every optimisation off.
func Classic() Policy { return Policy{} }

// ParsePolicy parses "concurrent", "seeds", "classic", or a comma-separated
// list of field names (e.g. "SharedDirectReads,SkipFullPageRMW"), each
// switched on.
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "concurrent":
		return Concurrent(), nil
	case "seeds":
		return Seeds(), nil
	case "classic":
		return Classic(), nil
	}
	var p Policy
	for _, f := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(f)) {
		case "shareddirectreads":
			p.SharedDirectReads = true
		case "optimisticunalignedwrites":
			p.OptimisticUnalignedWrites = true
		case "paralleldirectwrites":
			p.ParallelDirectWrites = true
		case "asyncbufferedreads":
			p.AsyncBufferedReads = true
		case "skipfullpagermw":
			p.SkipFullPageRMW = true
		case "parallelappends":
			p.ParallelAppends = true
		case "blockrangeexclusion":
			p.BlockRangeExclusion = true
		default:
			return Policy{}, fmt.Errorf("unknown policy %q: use concurrent, seeds, classic or a list of SharedDirectReads, OptimisticUnalignedWrites, ParallelDirectWrites, AsyncBufferedReads, SkipFullPageRMW, ParallelAppends, BlockRangeExclusion", f)
		}
	}
	return p, nil
}

// String names the preset, or lists the fields that are on.
func (p Policy) String() string {
	switch p {
	case Concurrent():
		return "concurrent"
	case Seeds():
		return "seeds"
	case Classic():
		return "classic"
	}
	var on []string
	for _, f := range []struct {
		on   bool
		name string
	}{
		{p.SharedDirectReads, "SharedDirectReads"},
		{p.OptimisticUnalignedWrites, "OptimisticUnalignedWrites"},
		{p.ParallelDirectWrites, "ParallelDirectWrites"},
		{p.AsyncBufferedReads, "AsyncBufferedReads"},
		{p.SkipFullPageRMW, "SkipFullPageRMW"},
		{p.ParallelAppends, "ParallelAppends"},
		{p.BlockRangeExclusion, "BlockRangeExclusion"},
	} {
		if f.on {
			on = append(on, f.name)
		}
	}
	return strings.Join(on, ",")
}

// DefaultCacheSizeBytes is the default page cache capacity.
const DefaultCacheSizeBytes = 256 << 20

// Options configures an FS. The zero value is valid: every field has a
// default.
type Options struct {
	// Policy selects the seed optimisations. The default value is
	// Concurrent() (nil means the default).
	Policy *Policy
	// CacheSizeBytes caps the memory of the page cache. The default value
	// is DefaultCacheSizeBytes (256 MiB).
	CacheSizeBytes int64
	// DirtyRatio is the fraction of the cache that may be dirty before
	// buffered writers are throttled and writeback is kicked. The default
	// value is 0.5.
	DirtyRatio float64
	// WritebackAge is how long a dirty page may stay dirty before the
	// background flusher writes it back. The default value is 5s.
	WritebackAge time.Duration
	// SyncInterval is how often the background syncer makes completed
	// writes and metadata durable when nobody calls Fsync (a crash loses at
	// most about this much un-fsynced work). The default value is 5s.
	SyncInterval time.Duration
	// NoGroupCommit makes each Fsync run its own device flush and metadata
	// sync instead of sharing one with concurrent callers. It exists to
	// measure group commit. The default value is false.
	NoGroupCommit bool
	// ReadOnly refuses every change with EROFS. The default value is false.
	ReadOnly bool
	// NoAtomicWrites refuses RWFAtomic writes with EOPNOTSUPP, and
	// AtomicWriteLimits reports none. The default value is false.
	NoAtomicWrites bool
	// NoVerifyDataChecksums returns data whose checksum does not match
	// instead of failing the read with EIO (mismatches are still counted
	// and logged): to salvage what a damaged file holds. It changes
	// nothing on a volume without data checksums. The default value is
	// false.
	NoVerifyDataChecksums bool
	// Logf receives the problems the file system logs (a data checksum
	// mismatch, once per block). The default value is log.Printf.
	Logf func(format string, args ...any)
	// Device configures the data device when Open opens a volume
	// directory (backend, buffered fallback). The default value is the zero
	// volume.DeviceOptions.
	Device volume.DeviceOptions
}

// EnsureDefaults fills unset fields with their defaults and returns o. A
// nil o gives all defaults.
func (o *Options) EnsureDefaults() *Options {
	if o == nil {
		o = &Options{}
	}
	if o.Policy == nil {
		p := Concurrent()
		o.Policy = &p
	}
	if o.CacheSizeBytes == 0 {
		o.CacheSizeBytes = DefaultCacheSizeBytes
	}
	if o.DirtyRatio == 0 {
		o.DirtyRatio = 0.5
	}
	if o.WritebackAge == 0 {
		o.WritebackAge = 5 * time.Second
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = 5 * time.Second
	}
	return o
}

// Validate reports every problem with o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.CacheSizeBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("CacheSizeBytes %d is below the 1 MiB minimum", o.CacheSizeBytes))
	}
	if o.DirtyRatio <= 0 || o.DirtyRatio > 1 {
		errs = append(errs, fmt.Errorf("DirtyRatio %g is not in (0, 1]", o.DirtyRatio))
	}
	if o.WritebackAge < 0 {
		errs = append(errs, fmt.Errorf("WritebackAge %v is negative", o.WritebackAge))
	}
	if o.SyncInterval < 0 {
		errs = append(errs, fmt.Errorf("SyncInterval %v is negative", o.SyncInterval))
	}
	return errors.Join(errs...)
}

// String renders o on one line so that a benchmark or a test can record
// exactly what it ran with.
func (o *Options) String() string {
	p := "default"
	if o.Policy != nil {
		p = o.Policy.String()
	}
	return fmt.Sprintf("policy=%s cache=%d dirty_ratio=%g writeback_age=%v sync_interval=%v group_commit=%t read_only=%t atomic_writes=%t device={%s}",
		p, o.CacheSizeBytes, o.DirtyRatio, o.WritebackAge, o.SyncInterval, !o.NoGroupCommit, o.ReadOnly, !o.NoAtomicWrites, o.Device.String())
}
