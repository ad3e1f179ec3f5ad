package checksum

import (
	"errors"
	"testing"

	"github.com/sluicefs/sluice/meta"
)

func blocks(n int, seed byte) []byte {
	b := make([]byte, n*4096)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

type mapKV map[string][]byte

func (m mapKV) Scan(start, end []byte, fn func(k, v []byte) error) error {
	for k, v := range m {
		if k >= string(start) && k < string(end) {
			if err := fn([]byte(k), v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m mapKV) Get(k []byte) ([]byte, error) {
	if v, ok := m[string(k)]; ok {
		return v, nil
	}
	return nil, meta.ErrNotFound
}

// TestSetVerifyFlushLoad: checksums set for a run of blocks across a chunk
// boundary verify, a changed block is named, an unset one is missing, and
// what Flush writes loads back into a new table that verifies the same.
func TestSetVerifyFlushLoad(t *testing.T) {
	tb := New(4096)
	data := blocks(5, 1)
	const dev = meta.SumChunkBlocks - 2 // spans two chunks
	tb.Set(dev, data)
	if _, err := tb.Verify(dev, data); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), data...)
	bad[3*4096+17] ^= 4
	if b, err := tb.Verify(dev, bad); !errors.Is(err, ErrMismatch) || b != dev+3 {
		t.Fatalf("corrupt block 3: block %d, %v", b, err)
	}
	if b, err := tb.Verify(dev+5, blocks(1, 2)); !errors.Is(err, ErrMissing) || b != dev+5 {
		t.Fatalf("unset block: block %d, %v", b, err)
	}
	if tb.Dirty() != 2 {
		t.Fatalf("%d dirty chunks, want 2", tb.Dirty())
	}
	kv := mapKV{}
	tb.Flush(func(k, v []byte) { kv[string(k)] = v })
	if tb.Dirty() != 0 || len(kv) != 2 {
		t.Fatalf("after Flush: %d dirty, %d records", tb.Dirty(), len(kv))
	}
	tb2 := New(4096)
	if err := tb2.Load(kv); err != nil {
		t.Fatal(err)
	}
	if _, err := tb2.Verify(dev, data); err != nil {
		t.Fatal(err)
	}
}
