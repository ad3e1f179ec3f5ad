// Package lockrank gives every lock of the sluice engine a rank and checks,
// in builds with the race detector or the invariants tag, that each
// goroutine takes locks in increasing rank order (the habit of the Go
// runtime's lockrank, gVisor's lock validator and Pebble's invariants).
//
// A lock's rank is part of its type: a field declared
//
//	mu lockrank.Mutex[lockrank.InodeMu]
//
// is a sync.Mutex of rank InodeMu, usable as a sync.Locker (sync.Cond
// included). Locks that are not sync mutexes (the I/O lock, page locks)
// call Acquire, TryAcquired and Release themselves.
//
// # The rule
//
// A goroutine may take a lock of rank r only while every lock it holds has
// a rank below r. Ranks marked multi may be held several at once when they
// are taken in increasing key order (inode mutexes by inode number, page
// locks by index). Ranks marked leaf are taken last: nothing is taken while
// one is held. A lock taken by TryLock cannot wait, so its own acquisition
// is not checked, but locks taken while it is held are.
//
// A lock that a goroutine takes and a device completion releases (a page
// locked for a read, an I/O lock held until a write completes) is handed
// over with Handoff when the request is submitted: from then on it belongs
// to the request, not to the goroutine, whose later acquisitions are no
// longer checked against it. A Release by a goroutine that does not hold
// the lock (and it was not handed off) removes it from its owner.
//
// A violation panics with the lock being taken, the stack taking it, and
// every lock the goroutine holds with the stack that took it. Without race
// or invariants the checks compile to nothing.
//
// The order below is the engine's lock order; the package doc of sluice
// (doc.go) repeats it for readers, and a test there keeps the two equal.
package lockrank

// Rank orders locks: a goroutine takes locks in increasing rank.
type Rank uint8

// The ranks, lowest (taken first) to highest.
const (
	rankNone Rank = iota
	// RankFilePos: File.posMu, the file position (Read, Write, Seek).
	RankFilePos
	// RankNamespace: FS.ns, shared for lookups, exclusive for changes.
	RankNamespace
	// RankIOLock: inode.io, the I/O lock (iolock.Lock); several (a clone's
	// two files) in inode-number order.
	RankIOLock
	// RankBlockRange: an inode's block-range lock (iolock.RangeLock): the
	// file blocks a sub-block direct write or an append works on, taken
	// under the I/O lock, held until the write completes.
	RankBlockRange
	// RankAppends: an inode's append reservations (the queue of appends in
	// flight and the publication of their sizes).
	RankAppends
	// RankSyncSerial: the serial sync point's mutex (NoGroupCommit), held
	// across a whole sync point.
	RankSyncSerial
	// RankPage: page locks (pagecache), several in index order.
	RankPage
	// RankReadahead: an inode's readahead state.
	RankReadahead
	// RankInodeMu: inode.mu (attributes, size, extent map), several in
	// inode-number order.
	RankInodeMu
	// RankCommit: FS.commitMu, metadata transactions.
	RankCommit
	// RankAlloc: the allocator's mutex.
	RankAlloc
	// RankRefcount: the shared-block table's mutex (refcount.Table).
	RankRefcount
	// RankICache: FS.icache.mu, the in-core inode table.
	RankICache
	// RankMapping: a page-cache mapping's mutex (one file's pages).
	RankMapping
	// RankPageState: a page's state mutex (flags, waiters).
	RankPageState
	// RankCache: the page cache's mutex (LRU, free buffers, counts).
	RankCache
	// RankLeaf: short critical sections that take nothing else: the dirty
	// set, the open-file set, in-flight counters, group-sync state, the I/O
	// lock's and DIO counter's internals, error slots.
	RankLeaf
	numRanks
)

type rankInfo struct {
	name  string
	multi bool // several may be held, taken in increasing key order
	leaf  bool // nothing may be taken while one is held
}

var ranks = [numRanks]rankInfo{
	rankNone:       {name: "none"},
	RankFilePos:    {name: "FilePos"},
	RankNamespace:  {name: "Namespace"},
	RankIOLock:     {name: "IOLock", multi: true},
	RankBlockRange: {name: "BlockRange"},
	RankAppends:    {name: "Appends"},
	RankSyncSerial: {name: "SyncSerial"},
	RankPage:       {name: "Page", multi: true},
	RankReadahead:  {name: "Readahead"},
	RankInodeMu:    {name: "InodeMu", multi: true},
	RankCommit:     {name: "Commit"},
	RankAlloc:      {name: "Alloc"},
	RankRefcount:   {name: "Refcount"},
	RankICache:     {name: "ICache"},
	RankMapping:    {name: "Mapping"},
	RankPageState:  {name: "PageState"},
	RankCache:      {name: "Cache"},
	RankLeaf:       {name: "Leaf", leaf: true},
}

// String returns the rank's name.
func (r Rank) String() string {
	if r < numRanks {
		return ranks[r].name
	}
	return "rank(" + itoa(uint64(r)) + ")"
}

// Names returns the names of the ranks in order, lowest first.
func Names() []string {
	var s []string
	for r := rankNone + 1; r < numRanks; r++ {
		s = append(s, ranks[r].name)
	}
	return s
}

// Ranked is implemented by the marker types that name a rank in a lock's
// type (Mutex[InodeMu]).
type Ranked interface{ Rank() Rank }

// Marker types, one per rank.
type (
	FilePos    struct{}
	Namespace  struct{}
	Appends    struct{}
	SyncSerial struct{}
	Readahead  struct{}
	InodeMu    struct{}
	Commit     struct{}
	Alloc      struct{}
	Refcount   struct{}
	ICache     struct{}
	Mapping    struct{}
	PageState  struct{}
	Cache      struct{}
	Leaf       struct{}
)

func (FilePos) Rank() Rank    { return RankFilePos }
func (Namespace) Rank() Rank  { return RankNamespace }
func (Appends) Rank() Rank    { return RankAppends }
func (SyncSerial) Rank() Rank { return RankSyncSerial }
func (Readahead) Rank() Rank  { return RankReadahead }
func (InodeMu) Rank() Rank    { return RankInodeMu }
func (Commit) Rank() Rank     { return RankCommit }
func (Alloc) Rank() Rank      { return RankAlloc }
func (Refcount) Rank() Rank   { return RankRefcount }
func (ICache) Rank() Rank     { return RankICache }
func (Mapping) Rank() Rank    { return RankMapping }
func (PageState) Rank() Rank  { return RankPageState }
func (Cache) Rank() Rank      { return RankCache }
func (Leaf) Rank() Rank       { return RankLeaf }

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
