package bench

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"

	"github.com/sluicefs/sluice/device"
)

// The bookkeeping of A1 and Z1, shared by the engine's workloads and the
// Go runner's.
//
// A1's records: each append writes one record, tagged with its appender
// and that appender's sequence number at both ends, so that the file can
// be checked afterwards: every record present exactly once, none torn,
// nothing else in the file. The rest of the record is a pattern of the
// appender's.
//
// Z1's fresh blocks: freshBlockOrder.

// recordMagic opens and closes every record.
const recordMagic = "sluiceA1"

// recordTagBytes is the tag at each end of a record: the magic, the
// appender (uint32) and its sequence number (uint64), little-endian.
const recordTagBytes = len(recordMagic) + 4 + 8

// fillRecordBody fills rec (at least two tags long) with appender g's
// pattern; tagRecord then sets the tags of each record.
func fillRecordBody(rec []byte, g int) {
	for i := range rec {
		rec[i] = byte(g*31 + i*7)
	}
}

// tagRecord writes the tags of appender g's record number seq into rec.
func tagRecord(rec []byte, g int, seq int64) {
	putTag(rec[:recordTagBytes], g, seq)
	putTag(rec[len(rec)-recordTagBytes:], g, seq)
}

func putTag(b []byte, g int, seq int64) {
	copy(b, recordMagic)
	binary.LittleEndian.PutUint32(b[len(recordMagic):], uint32(g))
	binary.LittleEndian.PutUint64(b[len(recordMagic)+4:], uint64(seq))
}

// readTag returns the appender and sequence number of a tag, and whether
// it is one.
func readTag(b []byte) (g int, seq int64, ok bool) {
	if string(b[:len(recordMagic)]) != recordMagic {
		return 0, 0, false
	}
	return int(binary.LittleEndian.Uint32(b[len(recordMagic):])), int64(binary.LittleEndian.Uint64(b[len(recordMagic)+4:])), true
}

// verifyRecords checks a file of size bytes, read through r, that the
// appenders filled with records of bs bytes, appender g having written
// counts[g] of them (sequence numbers 0 to counts[g]-1): its size is
// exactly their total, and every record is there once, whole (its two
// tags agree). It reads 1 MiB at a time into an aligned buffer, so r may
// be an O_DIRECT file. The error describes the first problems found and
// how many there were.
func verifyRecords(r io.ReaderAt, size int64, bs int, counts []int64) error {
	var total int64
	seen := make([][]bool, len(counts))
	for g, c := range counts {
		total += c
		seen[g] = make([]bool, c)
	}
	if want := total * int64(bs); size != want {
		what := "records were lost or overwritten"
		if size > want {
			what = "the file holds more than was appended"
		}
		return fmt.Errorf("verify: the file is %d bytes, but %d records of %d B (%d bytes) were appended: %s", size, total, bs, want, what)
	}
	chunk := max(bs, (1<<20)/bs*bs)
	buf := device.AlignedBuf(chunk)
	var problems []string
	bad := 0
	report := func(off int64, format string, args ...any) {
		bad++
		if len(problems) < 3 {
			problems = append(problems, fmt.Sprintf("record at %d: ", off)+fmt.Sprintf(format, args...))
		}
	}
	for off := int64(0); off < size; off += int64(chunk) {
		n := int(min(int64(chunk), size-off))
		if m, err := r.ReadAt(buf[:n], off); m < n {
			return fmt.Errorf("verify: reading %d B at %d: got %d: %v", n, off, m, err)
		}
		for i := 0; i+bs <= n; i += bs {
			rec := buf[i : i+bs]
			at := off + int64(i)
			g, seq, ok := readTag(rec[:recordTagBytes])
			g2, seq2, ok2 := readTag(rec[bs-recordTagBytes:])
			switch {
			case !ok || !ok2:
				report(at, "no tag (zeros or foreign data)")
			case g != g2 || seq != seq2:
				report(at, "torn: head says appender %d #%d, tail appender %d #%d", g, seq, g2, seq2)
			case g < 0 || g >= len(counts) || seq < 0 || seq >= counts[g]:
				report(at, "appender %d #%d was never written", g, seq)
			case seen[g][seq]:
				report(at, "appender %d #%d appears twice", g, seq)
			default:
				seen[g][seq] = true
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("verify: %d of %d records wrong: %s", bad, total, strings.Join(problems, "; "))
	}
	// With the size right and no record twice or foreign, every record
	// is there: the file has room for exactly the records written.
	return nil
}

// freshBlockOrder returns the blocks of a region in a random order
// (seeded), for writes that must each land in a block not written before.
func freshBlockOrder(blocks int64, seed uint64) []int32 {
	order := make([]int32, blocks)
	for i := range order {
		order[i] = int32(i)
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}
