// Package checksum keeps the data checksums of a volume: the CRC-32C of
// every device block that holds file data, in memory, mirrored in the
// metadata as one record per SumChunkBlocks device blocks (meta "K"
// records). It does no I/O and knows nothing of files: the engine sets a
// block's checksum when it writes the block and verifies it when it reads
// the block back.
//
// # Durability
//
// Set changes the in-core table at once and marks the block's chunk dirty;
// Flush writes every dirty chunk into a metadata transaction. The engine
// flushes in every transaction it commits, and sets a block's checksum
// before the block's data is written, so the record that makes a block
// readable as written (a conversion or a remap, persisted by a later
// transaction) never reaches the metadata before its checksum. Checksums of
// blocks no record reads (written and never converted, freed, staging) are
// harmless: nothing verifies them.
//
// The engine's rule that makes this enough is that a block is written at
// most once between its allocation and its release (atomic.go, in the
// engine): a block that some record may read as written is never written
// again, so its checksum never changes while anything may verify it.
//
// # Memory
//
// The whole table is loaded at open (Load): 4 bytes per written block plus
// a mask per chunk, about 0.1% of the data at 4 KiB blocks.
//
// # Concurrency
//
// Every method is safe for concurrent use. The table's mutex is a leaf
// (lockrank.Leaf): nothing is called while it is held.
package checksum

import (
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/sluicefs/sluice/internal/lockrank"
	"github.com/sluicefs/sluice/meta"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sum returns the CRC-32C of b.
func Sum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// ErrMismatch is wrapped by Verify's error when a block's data does not
// match its checksum, and ErrMissing when a block has none.
var (
	ErrMismatch = errors.New("data checksum mismatch")
	ErrMissing  = errors.New("no data checksum")
)

// Table is the in-core checksum table of one volume.
type Table struct {
	bs int64 // the block size. Immutable.
	mu lockrank.Mutex[lockrank.Leaf]
	// chunks holds the loaded and set checksums, by chunk number.
	// Protected by mu.
	chunks map[uint64]*meta.SumChunk
	// dirty holds the chunks set since the last Flush. Protected by mu.
	dirty map[uint64]struct{}
}

// New returns an empty table for blocks of bs bytes.
func New(bs int64) *Table {
	return &Table{bs: bs, chunks: map[uint64]*meta.SumChunk{}, dirty: map[uint64]struct{}{}}
}

// Load reads every checksum record of r into the table.
func (t *Table) Load(r meta.Reader) error {
	start, end := meta.SumsKeyRange()
	t.mu.Lock()
	defer t.mu.Unlock()
	return r.Scan(start, end, func(k, v []byte) error {
		chunk, c, err := meta.DecodeSums(k, v)
		if err != nil {
			return err
		}
		t.chunks[chunk] = c
		return nil
	})
}

// Set records the checksums of the whole blocks of buf, written from
// device block dev on, and returns how many chunks then await a Flush.
// len(buf) must be a multiple of the block size.
func (t *Table) Set(dev uint64, buf []byte) (dirty int) {
	n := int64(len(buf)) / t.bs
	sums := make([]uint32, 0, 16)
	for i := int64(0); i < n; i++ {
		sums = append(sums, Sum(buf[i*t.bs:(i+1)*t.bs]))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, s := range sums {
		b := dev + uint64(i)
		chunk, j := b/meta.SumChunkBlocks, b%meta.SumChunkBlocks
		c := t.chunks[chunk]
		if c == nil {
			c = &meta.SumChunk{}
			t.chunks[chunk] = c
		}
		c.Mask |= 1 << j
		c.Sums[j] = s
		t.dirty[chunk] = struct{}{}
	}
	return len(t.dirty)
}

// Get returns the checksum of device block b, if it has one.
func (t *Table) Get(b uint64) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.chunks[b/meta.SumChunkBlocks]
	if c == nil || c.Mask&(1<<(b%meta.SumChunkBlocks)) == 0 {
		return 0, false
	}
	return c.Sums[b%meta.SumChunkBlocks], true
}

// Verify checks the whole blocks of buf, read from device block dev on,
// against their checksums. It returns nil, or an error wrapping
// ErrMismatch or ErrMissing that names the first bad block, which it also
// returns.
func (t *Table) Verify(dev uint64, buf []byte) (bad uint64, err error) {
	n := int64(len(buf)) / t.bs
	for i := int64(0); i < n; i++ {
		b := dev + uint64(i)
		want, ok := t.Get(b)
		if !ok {
			return b, fmt.Errorf("device block %d: %w", b, ErrMissing)
		}
		if got := Sum(buf[i*t.bs : (i+1)*t.bs]); got != want {
			return b, fmt.Errorf("device block %d: crc32c %08x, recorded %08x: %w", b, got, want, ErrMismatch)
		}
	}
	return 0, nil
}

// Flush calls set with the key and value of every chunk set since the last
// Flush, for the caller's metadata transaction, and forgets that they were
// dirty.
func (t *Table) Flush(set func(key, value []byte)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for chunk := range t.dirty {
		set(meta.SumsKey(chunk), meta.EncodeSums(t.chunks[chunk]))
		delete(t.dirty, chunk)
	}
}

// Dirty reports how many chunks await a Flush.
func (t *Table) Dirty() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty)
}
