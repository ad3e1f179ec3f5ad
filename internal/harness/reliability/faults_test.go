package reliability

import (
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/meta"
)

// errMetaInjected is what faultKV's failures report. Like most of
// Pebble's own errors it carries no errno: mapping it to EIO is the
// engine's job.
var errMetaInjected = &injectedError{}

type injectedError struct{}

func (*injectedError) Error() string { return "injected metadata store failure" }

// faultKV wraps a meta.KV and fails commits or syncs on demand: the test
// double for a metadata store that can no longer write (the engine must
// shut itself down and leave what is on disk consistent).
type faultKV struct {
	meta.KV
	commits atomic.Int64 // commits attempted
	syncs   atomic.Int64 // syncs attempted
	// failCommitFrom and failSyncFrom: fail every commit (sync) whose
	// 1-based number is >= the value; 0 never fails.
	failCommitFrom atomic.Int64
	failSyncFrom   atomic.Int64
	// failedCommits counts commits refused.
	failedCommits atomic.Int64
	// failGet, if set, makes Get fail for the keys it selects.
	failGet atomic.Pointer[func(key []byte) bool]
}

// FailGets makes Get fail for every key sel selects (nil: none).
func (k *faultKV) FailGets(sel func(key []byte) bool) {
	if sel == nil {
		k.failGet.Store(nil)
		return
	}
	k.failGet.Store(&sel)
}

func (k *faultKV) Get(key []byte) ([]byte, error) {
	if p := k.failGet.Load(); p != nil && (*p)(key) {
		return nil, errMetaInjected
	}
	return k.KV.Get(key)
}

func newFaultKV(kv meta.KV) *faultKV { return &faultKV{KV: kv} }

// FailCommitsAfter makes the (n+1)th commit from now, and every later one,
// fail without writing anything.
func (k *faultKV) FailCommitsAfter(n int64) { k.failCommitFrom.Store(k.commits.Load() + n + 1) }

// FailSyncsAfter makes the (n+1)th sync from now, and every later one,
// fail.
func (k *faultKV) FailSyncsAfter(n int64) { k.failSyncFrom.Store(k.syncs.Load() + n + 1) }

// Heal stops every failure.
func (k *faultKV) Heal() {
	k.failCommitFrom.Store(0)
	k.failSyncFrom.Store(0)
	k.failGet.Store(nil)
}

func (k *faultKV) NewTxn() meta.Txn { return &faultTxn{Txn: k.KV.NewTxn(), k: k} }

func (k *faultKV) Sync() error {
	n := k.syncs.Add(1)
	if f := k.failSyncFrom.Load(); f != 0 && n >= f {
		return errMetaInjected
	}
	return k.KV.Sync()
}

type faultTxn struct {
	meta.Txn
	k *faultKV
}

func (t *faultTxn) Commit(sync bool) error {
	n := t.k.commits.Add(1)
	if f := t.k.failCommitFrom.Load(); f != 0 && n >= f {
		t.k.failedCommits.Add(1)
		t.Txn.Abort()
		return errMetaInjected
	}
	return t.Txn.Commit(sync)
}

// lossyDev is a drive with a volatile write cache whose failed flush
// loses that cache: every write not yet durable when a flush fails
// reverts to the durable contents, on the media and in what reads return.
// It is the device.Device contract taken literally ("a write that
// completed before a failed flush must be redone before it can be trusted
// durable"): a file system that reports a later fsync as successful
// without rewriting the data is caught by reading the data back.
//
// It wraps a memdev.Device and is meant to be used quiescently around the
// failing flush (tests arm it, call fsync, and look).
type lossyDev struct {
	*memdev.Device
	mu       sync.Mutex
	failNext int // flushes still to fail. Protected by mu.
	lost     int // writes lost so far. Protected by mu.
}

func newLossyDev(m *memdev.Device) *lossyDev { return &lossyDev{Device: m} }

// FailFlushes makes the next n flushes fail with EIO, losing the cache.
func (d *lossyDev) FailFlushes(n int) {
	d.mu.Lock()
	d.failNext = n
	d.mu.Unlock()
}

// Lost returns the number of writes lost by failed flushes.
func (d *lossyDev) Lost() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}

func (d *lossyDev) Submit(r *device.Request) error {
	if r.Op == device.OpFlush {
		d.mu.Lock()
		fail := d.failNext > 0
		if fail {
			d.failNext--
		}
		d.mu.Unlock()
		if fail {
			err := d.loseCache()
			if err == nil {
				err = syscall.EIO
			}
			go r.Done(r, device.NewError(r, err))
			return nil
		}
	}
	return d.Device.Submit(r)
}

// loseCache puts the durable contents back over every pending write.
func (d *lossyDev) loseCache() error {
	pending := d.Device.Pending()
	if len(pending) == 0 {
		return nil
	}
	durable := d.Device.CrashImageWith(func(memdev.PendingWrite) memdev.Fate { return memdev.Fate{Kind: memdev.Drop} })
	defer durable.Close()
	for _, w := range pending {
		old := device.AlignedBuf(len(w.Data))
		if err := device.ReadAt(durable, old, w.Off); err != nil {
			return err
		}
		if err := device.WriteAt(d.Device, old, w.Off); err != nil {
			return err
		}
	}
	d.mu.Lock()
	d.lost += len(pending)
	d.mu.Unlock()
	return nil
}

var _ device.Device = (*lossyDev)(nil)
