package reliability

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicefs/sluice/meta"
)

var writeSeedCorpus = flag.Bool("write-seed-corpus", false, "write the fuzz targets' seeds to testdata/fuzz")

// fuzzSeeds lists the seed inputs of every fuzz target of this package.
func fuzzSeeds() map[string][][]any {
	s := map[string][][]any{}
	for _, h := range seedHeaders() {
		s["FuzzDecodeHeader"] = append(s["FuzzDecodeHeader"], []any{h.Encode()})
	}
	s["FuzzDecodeHeader"] = append(s["FuzzDecodeHeader"], []any{[]byte{}}, []any{[]byte("SLUICEFS")})

	s["FuzzHeaderCorruption"] = [][]any{
		{uint32(4096), uint32(512), uint64(64 << 20), uint64(1), uint16(0), uint32(1)},
		{uint32(512), uint32(512), uint64(1 << 20), uint64(1), uint16(480), uint32(0xffffffff)},
		{uint32(4096), uint32(4096), uint64(1 << 30), uint64(1), uint16(500), uint32(0x80000001)},
		{uint32(65536), uint32(512), uint64(1 << 40), uint64(3), uint16(200), uint32(0x00f00f01)},
	}

	for kind, kv := range seedRecords() {
		s["FuzzMetaRecord"] = append(s["FuzzMetaRecord"], []any{byte(kind), kv[0], kv[1]})
	}
	s["FuzzMetaRecord"] = append(s["FuzzMetaRecord"],
		[]any{byte(recExtent), meta.ExtentKey(1, ^uint64(0)-1), meta.EncodeExtent(meta.Extent{DevBlock: 1, Len: 5, State: meta.Written})},
		[]any{byte(recFree), meta.FreeKey(^uint64(0) - 1), meta.EncodeFree(9)},
		[]any{byte(recDirent), []byte("D\x00\x00\x00\x00\x00\x00\x00\x01"), []byte{}},
	)

	for kind := range numRecKinds {
		s["FuzzMetaValueCorruption"] = append(s["FuzzMetaValueCorruption"],
			[]any{byte(kind), uint64(12345), uint16(3), uint32(1)},
			[]any{byte(kind), uint64(1), uint16(200), uint32(0xdeadbeef)})
	}

	for _, p := range pathSeeds() {
		s["FuzzPaths"] = append(s["FuzzPaths"], []any{[]byte(p)})
	}

	s["FuzzCorruptVolume"] = [][]any{
		{byte(0), uint32(8), []byte{0xff}},
		{byte(0), uint32(100), []byte("garbage after the header")},
		{byte(1), uint32(0), []byte{}},
		{byte(1), uint32(5), []byte("\x01garbage")},
		{byte(1), uint32(17), []byte{}},
		{byte(2), uint32(1234), []byte{0x80}},
	}
	for i := range 40 { // one bit flipped in each record of the template
		s["FuzzCorruptVolume"] = append(s["FuzzCorruptVolume"], []any{byte(1), uint32(i) | uint32(i*13+5)<<16, []byte{}})
	}
	return s
}

// marshalCorpus encodes one input in the "go test fuzz v1" format.
func marshalCorpus(vals []any) []byte {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch t := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", t)
		case byte:
			fmt.Fprintf(&b, "byte(%q)\n", t)
		case uint16:
			fmt.Fprintf(&b, "uint16(%d)\n", t)
		case uint32:
			fmt.Fprintf(&b, "uint32(%d)\n", t)
		case uint64:
			fmt.Fprintf(&b, "uint64(%d)\n", t)
		default:
			panic(fmt.Sprintf("marshalCorpus: %T", v))
		}
	}
	return []byte(b.String())
}

// TestSeedCorpora checks that every fuzz target has its seeds committed
// under testdata/fuzz (so that CI runs them), and with -write-seed-corpus
// writes them there.
func TestSeedCorpora(t *testing.T) {
	for target, inputs := range fuzzSeeds() {
		dir := filepath.Join("testdata", "fuzz", target)
		for i, in := range inputs {
			p := filepath.Join(dir, fmt.Sprintf("seed-%02d", i))
			want := marshalCorpus(in)
			if *writeSeedCorpus {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(p)
			if err != nil || string(got) != string(want) {
				t.Errorf("%s is missing or stale: run go test ./internal/harness/reliability -run TestSeedCorpora -write-seed-corpus", p)
			}
		}
	}
}
