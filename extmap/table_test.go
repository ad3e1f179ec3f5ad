package extmap

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice/meta"
)

// parseExts parses "FB+LEN@DEV S; ..." where S is W or U, optionally
// followed by an epoch: "0+4@100 W; 4+4@104 W5", and for a remapped
// extent by its old block, "(was @N)", or "(was @N U)" if its record says
// Unwritten, as fmtExt writes them. (Only Remap makes remaps: build cannot
// insert them.)
func parseExts(s string) []Extent {
	var out []Extent
	for _, f := range strings.Split(s, ";") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		var e Extent
		var st string
		if _, err := fmt.Sscanf(f, "%d+%d@%d %s", &e.FileBlock, &e.Len, &e.DevBlock, &st); err != nil {
			panic(fmt.Sprintf("bad extent %q: %v", f, err))
		}
		switch st[0] {
		case 'W':
			e.State = meta.Written
		case 'U':
			e.State = meta.Unwritten
		default:
			panic(fmt.Sprintf("bad state in %q", f))
		}
		if len(st) > 1 {
			if _, err := fmt.Sscanf(st[1:], "%d", &e.Epoch); err != nil {
				panic(fmt.Sprintf("bad epoch in %q", f))
			}
		}
		if _, was, ok := strings.Cut(f, "(was @"); ok {
			e.Remapped, e.OldUnwritten = true, strings.HasSuffix(was, " U)")
			if _, err := fmt.Sscanf(was, "%d", &e.OldDevBlock); err != nil {
				panic(fmt.Sprintf("bad old block in %q", f))
			}
		}
		out = append(out, e)
	}
	return out
}

func parseExt(s string) Extent { return parseExts(s)[0] }

func fmtExt(e Extent) string {
	s := fmt.Sprintf("%d+%d@%d ", e.FileBlock, e.Len, e.DevBlock)
	if e.State == meta.Written {
		s += "W"
	} else {
		s += "U"
	}
	if e.Epoch > 0 {
		s += fmt.Sprint(e.Epoch)
	}
	switch {
	case e.Remapped && e.OldUnwritten:
		s += fmt.Sprintf(" (was @%d U)", e.OldDevBlock)
	case e.Remapped:
		s += fmt.Sprintf(" (was @%d)", e.OldDevBlock)
	}
	return s
}

func fmtExts(es []Extent) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, fmtExt(e))
	}
	return strings.Join(parts, "; ")
}

// logRec records Recorder calls as "put <persisted record>" and "del FB".
type logRec struct{ log []string }

func (r *logRec) Put(e Extent)     { r.log = append(r.log, "put "+fmtExt(persistedExt(e))) }
func (r *logRec) Delete(fb uint64) { r.log = append(r.log, fmt.Sprintf("del %d", fb)) }

// build makes a map holding exts (pending ones included) by inserting
// them, and checks that it holds exactly them.
func build(t *testing.T, exts string) *Map {
	t.Helper()
	m := New()
	for _, e := range parseExts(exts) {
		if err := m.Insert(e, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := fmtExts(m.Extents()), fmtExts(parseExts(exts)); got != want {
		t.Fatalf("build(%q) made %q", exts, got)
	}
	return m
}

func TestTable(t *testing.T) {
	tests := []struct {
		name  string
		start string
		op    func(m *Map, r Recorder) any
		want  string   // extents after
		recs  []string // Recorder calls, in order
		ret   string   // fmt of op's result, if checked
	}{
		{
			name: "insert merges left", start: "0+4@100 W",
			op:   func(m *Map, r Recorder) any { return m.Insert(parseExt("4+4@104 W"), r) },
			want: "0+8@100 W", recs: []string{"put 0+8@100 W"},
		},
		{
			name: "insert merges right", start: "4+4@104 U",
			op:   func(m *Map, r Recorder) any { return m.Insert(parseExt("0+4@100 U"), r) },
			want: "0+8@100 U", recs: []string{"put 0+8@100 U", "del 4"},
		},
		{
			name: "insert merges both", start: "0+4@100 W; 8+4@108 W",
			op:   func(m *Map, r Recorder) any { return m.Insert(parseExt("4+4@104 W"), r) },
			want: "0+12@100 W", recs: []string{"put 0+12@100 W", "del 8"},
		},
		{
			name: "insert: device gap, no merge", start: "0+4@100 W",
			op:   func(m *Map, r Recorder) any { return m.Insert(parseExt("4+4@105 W"), r) },
			want: "0+4@100 W; 4+4@105 W", recs: []string{"put 4+4@105 W"},
		},
		{
			name: "insert: file gap, no merge", start: "0+4@100 W",
			op:   func(m *Map, r Recorder) any { return m.Insert(parseExt("5+4@104 W"), r) },
			want: "0+4@100 W; 5+4@104 W", recs: []string{"put 5+4@104 W"},
		},
		{
			name: "insert: state differs, no merge", start: "0+4@100 W",
			op:   func(m *Map, r Recorder) any { return m.Insert(parseExt("4+4@104 U"), r) },
			want: "0+4@100 W; 4+4@104 U", recs: []string{"put 4+4@104 U"},
		},
		{
			name: "insert: durable next to pending, no merge", start: "0+4@100 W",
			op:   func(m *Map, r Recorder) any { return m.Insert(parseExt("4+4@104 W3"), r) },
			want: "0+4@100 W; 4+4@104 W3", recs: []string{"put 4+4@104 U"},
		},
		{
			name: "insert: pending epochs differ, no merge", start: "0+4@100 W2",
			op:   func(m *Map, r Recorder) any { return m.Insert(parseExt("4+4@104 W3"), r) },
			want: "0+4@100 W2; 4+4@104 W3", recs: []string{"put 4+4@104 U"},
		},
		{
			name: "insert: pending, same epoch, merges", start: "0+4@100 W3",
			op:   func(m *Map, r Recorder) any { return m.Insert(parseExt("4+4@104 W3"), r) },
			want: "0+8@100 W3", recs: []string{"put 0+8@100 U"},
		},
		{
			name: "insert over a mapped block fails", start: "0+4@100 W",
			op: func(m *Map, r Recorder) any {
				err := m.Insert(parseExt("3+4@200 W"), r)
				return errors.Is(err, ErrMapped) && errors.Is(err, syscall.EEXIST)
			},
			want: "0+4@100 W", ret: "true",
		},
		{
			name: "insert of an empty extent fails", start: "0+4@100 W",
			op: func(m *Map, r Recorder) any {
				err := m.Insert(Extent{FileBlock: 8, DevBlock: 1, State: meta.Written}, r)
				return errors.Is(err, ErrInvalid) && errors.Is(err, syscall.EINVAL)
			},
			want: "0+4@100 W", ret: "true",
		},
		{
			name: "insert of an overflowing extent fails", start: "",
			op: func(m *Map, r Recorder) any {
				return errors.Is(m.Insert(Extent{FileBlock: math.MaxUint64, DevBlock: 1, Len: 1, State: meta.Written}, r), ErrInvalid)
			},
			want: "", ret: "true",
		},
		{
			name: "insert of unwritten with an epoch fails", start: "",
			op: func(m *Map, r Recorder) any {
				return errors.Is(m.Insert(Extent{DevBlock: 1, Len: 1, State: meta.Unwritten, Epoch: 1}, r), ErrInvalid)
			},
			want: "", ret: "true",
		},
		{
			name: "convert the middle of an unwritten extent", start: "0+10@100 U",
			op:   func(m *Map, r Recorder) any { m.Convert(3, 4, 0, r); return nil },
			want: "0+3@100 U; 3+4@103 W; 7+3@107 U",
			recs: []string{"put 0+3@100 U", "put 3+4@103 W", "put 7+3@107 U"},
		},
		{
			name: "convert the head with an epoch", start: "0+10@100 U",
			op:   func(m *Map, r Recorder) any { m.Convert(0, 4, 5, r); return nil },
			want: "0+4@100 W5; 4+6@104 U",
			recs: []string{"put 0+4@100 U", "put 4+6@104 U"},
		},
		{
			name: "convert a whole extent with an epoch: record unchanged", start: "0+4@100 U",
			op:   func(m *Map, r Recorder) any { m.Convert(0, 4, 5, r); return m.PendingLen() },
			want: "0+4@100 W5", ret: "1",
		},
		{
			name: "convert merges with written neighbours", start: "0+4@100 W; 4+4@104 U; 8+4@108 W",
			op:   func(m *Map, r Recorder) any { m.Convert(4, 4, 0, r); return nil },
			want: "0+12@100 W", recs: []string{"put 0+12@100 W", "del 4", "del 8"},
		},
		{
			name: "convert across holes and written blocks", start: "0+4@100 W; 6+4@106 U; 12+2@200 W2",
			op:   func(m *Map, r Recorder) any { m.Convert(2, 10, 7, r); return nil },
			want: "0+4@100 W; 6+4@106 W7; 12+2@200 W2",
		},
		{
			name: "convert past the end of the block space", start: "6+4@106 U",
			op:   func(m *Map, r Recorder) any { m.Convert(8, math.MaxUint64, 0, r); return nil },
			want: "6+2@106 U; 8+2@108 W", recs: []string{"put 6+2@106 U", "put 8+2@108 W"},
		},
		{
			name: "convert of nothing", start: "0+4@100 W",
			op: func(m *Map, r Recorder) any {
				m.Convert(0, 4, 0, r)
				m.Convert(10, 5, 1, r)
				m.Convert(1, 0, 1, r)
				return nil
			},
			want: "0+4@100 W",
		},
		{
			name: "unconvert part of a written extent", start: "0+10@100 W",
			op:   func(m *Map, r Recorder) any { m.Unconvert(2, 3, r); return nil },
			want: "0+2@100 W; 2+3@102 U; 5+5@105 W",
			recs: []string{"put 0+2@100 W", "put 2+3@102 U", "put 5+5@105 W"},
		},
		{
			name: "unconvert a pending extent: record unchanged", start: "0+4@100 W5",
			op:   func(m *Map, r Recorder) any { m.Unconvert(0, 4, r); return m.Pending() },
			want: "0+4@100 U", ret: "false",
		},
		{
			name: "unconvert merges with unwritten neighbours", start: "0+4@100 U; 4+4@104 W; 8+4@108 U",
			op:   func(m *Map, r Recorder) any { m.Unconvert(0, 100, r); return nil },
			want: "0+12@100 U", recs: []string{"put 0+12@100 U", "del 4", "del 8"},
		},
		{
			name: "mark durable below the epoch does nothing", start: "0+4@100 W5",
			op:   func(m *Map, r Recorder) any { m.MarkDurable(4, r); return m.Pending() },
			want: "0+4@100 W5", ret: "true",
		},
		{
			name: "mark durable", start: "0+4@100 W5; 10+4@110 W6; 20+4@120 W7",
			op:   func(m *Map, r Recorder) any { m.MarkDurable(6, r); return m.PendingLen() },
			want: "0+4@100 W; 10+4@110 W; 20+4@120 W7",
			recs: []string{"put 0+4@100 W", "put 10+4@110 W"}, ret: "1",
		},
		{
			name: "mark durable merges with a durable neighbour", start: "0+4@100 W; 4+4@104 W5",
			op:   func(m *Map, r Recorder) any { m.MarkDurable(5, r); return m.Pending() },
			want: "0+8@100 W", recs: []string{"put 0+8@100 W", "del 4"}, ret: "false",
		},
		{
			name: "mark durable merges pending epochs once both are durable", start: "0+4@100 W3; 4+4@104 W5; 8+4@108 W",
			op:   func(m *Map, r Recorder) any { m.MarkDurable(9, r); return m.Pending() },
			want: "0+12@100 W", recs: []string{"put 0+4@100 W", "put 0+12@100 W", "del 4", "del 8"}, ret: "false",
		},
		{
			name: "mark durable leaves a later epoch pending and unmerged", start: "0+4@100 W3; 4+4@104 W5",
			op:   func(m *Map, r Recorder) any { m.MarkDurable(3, r); return nil },
			want: "0+4@100 W; 4+4@104 W5", recs: []string{"put 0+4@100 W"},
		},
		{
			name: "remap a pending conversion: record unchanged", start: "0+4@100 W3",
			op: func(m *Map, r Recorder) any {
				released, err := m.Remap(0, 4, 500, 5, r)
				return fmt.Sprint(released, err, " ", fmtExt(persistedExt(m.Extents()[0])))
			},
			want: "0+4@500 W5 (was @100 U)", ret: "[] <nil> 0+4@100 U",
		},
		{
			name: "remap the middle of a pending conversion", start: "0+10@100 W3",
			op:   func(m *Map, r Recorder) any { return remapResult(m.Remap(3, 4, 500, 5, r)) },
			want: "0+3@100 W3; 3+4@500 W5 (was @103 U); 7+3@107 W3",
			recs: []string{"put 0+3@100 U", "put 3+4@103 U", "put 7+3@107 U"}, ret: "[] <nil>",
		},
		{
			name: "remap a pending conversion twice", start: "0+4@100 W3",
			op: func(m *Map, r Recorder) any {
				if _, err := m.Remap(0, 4, 500, 5, nil); err != nil {
					return err
				}
				return remapResult(m.Remap(1, 2, 600, 6, r))
			},
			want: "0+1@500 W5 (was @100 U); 1+2@600 W6 (was @101 U); 3+1@503 W5 (was @103 U)",
			recs: []string{"put 0+1@100 U", "put 1+2@101 U", "put 3+1@103 U"}, ret: "[{501 2}] <nil>",
		},
		{
			name: "remaps of pending conversions of different epochs merge", start: "0+2@100 W3; 2+2@102 W4",
			op:   func(m *Map, r Recorder) any { return remapResult(m.Remap(0, 4, 500, 5, r)) },
			want: "0+4@500 W5 (was @100 U)", recs: []string{"put 0+4@100 U", "del 2"}, ret: "[] <nil>",
		},
		{
			name: "remaps of a pending conversion and a durable extent do not merge", start: "0+2@100 W3; 2+2@102 W",
			op:   func(m *Map, r Recorder) any { return remapResult(m.Remap(0, 4, 500, 5, r)) },
			want: "0+2@500 W5 (was @100 U); 2+2@502 W5 (was @102)", ret: "[] <nil>",
		},
		{
			name: "remap of a durable extent next to a remapped conversion does not merge", start: "0+2@100 W3; 2+2@102 W",
			op: func(m *Map, r Recorder) any {
				if _, err := m.Remap(0, 2, 500, 5, nil); err != nil {
					return err
				}
				return remapResult(m.Remap(2, 2, 502, 5, r))
			},
			want: "0+2@500 W5 (was @100 U); 2+2@502 W5 (was @102)", ret: "[] <nil>",
		},
		{
			name: "remap of unwritten blocks still fails", start: "0+2@100 W3; 2+2@102 U",
			op: func(m *Map, r Recorder) any {
				_, err := m.Remap(0, 4, 500, 5, r)
				return errors.Is(err, ErrInvalid)
			},
			want: "0+2@100 W3; 2+2@102 U", ret: "true",
		},
		{
			name: "mark durable a remapped conversion", start: "0+4@100 W3; 4+4@104 W",
			op: func(m *Map, r Recorder) any {
				if _, err := m.Remap(0, 4, 500, 5, nil); err != nil {
					return err
				}
				return m.MarkDurable(5, r)
			},
			want: "0+4@500 W; 4+4@104 W", recs: []string{"put 0+4@500 W"}, ret: "[{{100 4} {500 4} true}]",
		},
		{
			name: "mark durable a remapped conversion before its conversion's epoch", start: "0+4@100 W7",
			op: func(m *Map, r Recorder) any {
				if _, err := m.Remap(0, 4, 500, 5, nil); err != nil {
					return err
				}
				return m.MarkDurable(5, r)
			},
			want: "0+4@500 W", recs: []string{"put 0+4@500 W"}, ret: "[{{100 4} {500 4} true}]",
		},
		{
			name: "unconvert a remapped conversion", start: "0+4@100 W3",
			op: func(m *Map, r Recorder) any {
				if _, err := m.Remap(0, 4, 500, 5, nil); err != nil {
					return err
				}
				return m.Unconvert(0, 2, r)
			},
			want: "0+2@500 U; 2+2@502 W5 (was @102 U)", recs: []string{"put 0+2@500 U", "put 2+2@102 U"},
			ret: "[{{100 2} {500 2} true}]",
		},
		{
			name: "punch a remapped conversion", start: "0+4@100 W3",
			op: func(m *Map, r Recorder) any {
				if _, err := m.Remap(0, 4, 500, 5, nil); err != nil {
					return err
				}
				return m.Remove(1, 2, r)
			},
			want: "0+1@500 W5 (was @100 U); 3+1@503 W5 (was @103 U)", recs: []string{"put 0+1@100 U", "put 3+1@103 U"},
			ret: "[{101 2} {501 2}]",
		},
		{
			name: "collapse a remapped conversion", start: "0+4@100 W3; 8+2@200 W3",
			op: func(m *Map, r Recorder) any {
				if _, err := m.Remap(0, 4, 500, 5, nil); err != nil {
					return err
				}
				if _, err := m.Remap(8, 2, 600, 5, nil); err != nil {
					return err
				}
				return m.CollapseRange(2, 4, r)
			},
			want: "0+2@500 W5 (was @100 U); 4+2@600 W5 (was @200 U)", recs: []string{"put 0+2@100 U", "put 4+2@200 U", "del 8"},
			ret: "[{102 2} {502 2}]",
		},
		{
			name: "remove the middle", start: "0+10@100 W",
			op:   func(m *Map, r Recorder) any { return m.Remove(3, 4, r) },
			want: "0+3@100 W; 7+3@107 W", recs: []string{"put 0+3@100 W", "put 7+3@107 W"}, ret: "[{103 4}]",
		},
		{
			name: "remove coalesces device ranges", start: "0+4@100 W; 6+4@104 U; 12+2@50 W3",
			op:   func(m *Map, r Recorder) any { return m.Remove(0, 20, r) },
			want: "", recs: []string{"del 0", "del 6", "del 12"}, ret: "[{50 2} {100 8}]",
		},
		{
			name: "remove: truncate", start: "0+4@100 W; 6+4@200 W",
			op:   func(m *Map, r Recorder) any { return m.Remove(2, math.MaxUint64, r) },
			want: "0+2@100 W", recs: []string{"put 0+2@100 W", "del 6"}, ret: "[{102 2} {200 4}]",
		},
		{
			name: "remove a hole", start: "0+4@100 W",
			op:   func(m *Map, r Recorder) any { return m.Remove(4, 10, r) == nil },
			want: "0+4@100 W", ret: "true",
		},
		{
			name: "remove keeps a pending tail pending", start: "0+8@100 W4",
			op:   func(m *Map, r Recorder) any { return m.Remove(0, 2, r) },
			want: "2+6@102 W4", recs: []string{"del 0", "put 2+6@102 U"}, ret: "[{100 2}]",
		},
		{
			name: "collapse splits and moves down", start: "0+8@100 W; 10+2@200 U",
			op:   func(m *Map, r Recorder) any { return m.CollapseRange(2, 4, r) },
			want: "0+2@100 W; 2+2@106 W; 6+2@200 U", recs: []string{"put 0+2@100 W", "put 2+2@106 W", "put 6+2@200 U", "del 10"},
			ret: "[{102 4}]",
		},
		{
			name: "collapse rejoins what an insert split", start: "0+2@100 W; 4+6@102 W",
			op:   func(m *Map, r Recorder) any { return m.CollapseRange(2, 2, r) },
			want: "0+8@100 W", recs: []string{"put 0+8@100 W", "del 4"}, ret: "[]",
		},
		{
			name: "collapse of a hole moves a pending extent", start: "4+2@100 W3",
			op:   func(m *Map, r Recorder) any { return m.CollapseRange(0, 4, r) },
			want: "0+2@100 W3", recs: []string{"put 0+2@100 U", "del 4"}, ret: "[]",
		},
		{
			name: "insert range splits and moves up", start: "0+8@100 W; 10+2@200 U",
			op:   func(m *Map, r Recorder) any { return m.InsertRange(2, 3, r) },
			want: "0+2@100 W; 5+6@102 W; 13+2@200 U", recs: []string{"put 0+2@100 W", "put 5+6@102 W", "del 10", "put 13+2@200 U"},
			ret: "<nil>",
		},
		{
			name: "insert range past 2^64-1", start: "0+8@100 W",
			op:   func(m *Map, r Recorder) any { return m.InsertRange(0, math.MaxUint64-4, r) != nil },
			want: "0+8@100 W", ret: "true",
		},
		{
			name: "insert range after the last extent", start: "0+8@100 W",
			op:   func(m *Map, r Recorder) any { return m.InsertRange(8, 4, r) },
			want: "0+8@100 W", ret: "<nil>",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := build(t, tc.start)
			r := &logRec{}
			ret := tc.op(m, r)
			if got := fmtExts(m.Extents()); got != fmtExts(parseExts(tc.want)) {
				t.Errorf("extents %q, want %q", got, fmtExts(parseExts(tc.want)))
			}
			if !slices.Equal(r.log, tc.recs) {
				t.Errorf("records %q, want %q", r.log, tc.recs)
			}
			if tc.ret != "" && fmt.Sprint(ret) != tc.ret {
				t.Errorf("returned %v, want %s", ret, tc.ret)
			}
			if err := m.Check(); err != nil {
				t.Error(err)
			}
		})
	}
}

// remapResult formats what Remap returns.
func remapResult(released []DevRange, err error) string { return fmt.Sprint(released, err) }

// persistedExt returns e's record as an Extent, for fmtExt.
func persistedExt(e Extent) Extent {
	p := e.Persisted()
	return Extent{FileBlock: p.FileBlock, DevBlock: p.DevBlock, Len: p.Len, State: p.State}
}

func TestLookup(t *testing.T) {
	m := build(t, "2+3@100 W; 5+2@200 U; 10+4@300 W6")
	for _, tc := range []struct {
		fb, n uint64
		want  string
	}{
		{0, 0, ""},
		{0, 2, "hole 0+2"},
		{0, 20, "hole 0+2; 2+3@100 W; 5+2@200 U; hole 7+3; 10+4@300 W; hole 14+6"},
		{3, 3, "3+2@101 W; 5+1@200 U"},
		{11, 2, "11+2@301 W"},
		{6, 5, "6+1@201 U; hole 7+3; 10+1@300 W"},
		{12, math.MaxUint64, fmt.Sprintf("12+2@302 W; hole 14+%d", uint64(math.MaxUint64-14))},
		{math.MaxUint64 - 1, 5, "hole 18446744073709551614+1"},
	} {
		var parts []string
		for _, s := range m.Lookup(tc.fb, tc.n, nil) {
			if s.Hole {
				parts = append(parts, fmt.Sprintf("hole %d+%d", s.FileBlock, s.Len))
			} else {
				parts = append(parts, fmtExt(Extent{FileBlock: s.FileBlock, Len: s.Len, DevBlock: s.DevBlock, State: s.State}))
			}
		}
		if got := strings.Join(parts, "; "); got != tc.want {
			t.Errorf("Lookup(%d, %d) = %q, want %q", tc.fb, tc.n, got, tc.want)
		}
	}
}

func TestSeekAndLast(t *testing.T) {
	m := build(t, "2+3@100 W; 5+2@200 U; 10+4@300 W6; 20+2@400 U")
	for _, tc := range []struct {
		fb       uint64
		data     uint64
		dataOK   bool
		nextHole uint64
	}{
		{0, 2, true, 0}, {2, 2, true, 7}, {4, 4, true, 7}, {6, 6, true, 7}, {7, 10, true, 7},
		{13, 13, true, 14}, {14, 20, true, 14}, {21, 21, true, 22}, {22, 0, false, 22},
	} {
		d, ok := m.NextData(tc.fb)
		if d != tc.data || ok != tc.dataOK {
			t.Errorf("NextData(%d) = %d, %v; want %d, %v", tc.fb, d, ok, tc.data, tc.dataOK)
		}
		if h := m.NextHole(tc.fb); h != tc.nextHole {
			t.Errorf("NextHole(%d) = %d, want %d", tc.fb, h, tc.nextHole)
		}
	}
	if end, ok := m.LastBlock(); end != 22 || !ok {
		t.Errorf("LastBlock = %d, %v", end, ok)
	}
	if end, ok := m.LastWritten(); end != 14 || !ok {
		t.Errorf("LastWritten = %d, %v", end, ok)
	}
	if m.Blocks() != 11 || m.Len() != 4 || !m.Pending() {
		t.Errorf("Blocks %d Len %d Pending %v", m.Blocks(), m.Len(), m.Pending())
	}
	empty := New()
	if _, ok := empty.LastBlock(); ok {
		t.Error("LastBlock of an empty map")
	}
	if _, ok := empty.LastWritten(); ok {
		t.Error("LastWritten of an empty map")
	}
	if _, ok := empty.NextData(0); ok {
		t.Error("NextData of an empty map")
	}
}

func TestLoad(t *testing.T) {
	rec := func(fb, dev, n uint64, s meta.ExtentState) meta.Extent {
		return meta.Extent{FileBlock: fb, DevBlock: dev, Len: n, State: s}
	}
	W, U := meta.Written, meta.Unwritten
	for _, tc := range []struct {
		name    string
		records []meta.Extent
	}{
		{"file overlap", []meta.Extent{rec(10, 100, 5, W), rec(0, 200, 11, W)}},
		{"device overlap", []meta.Extent{rec(0, 100, 5, W), rec(10, 104, 5, U)}},
		{"zero length", []meta.Extent{rec(0, 100, 0, W)}},
		{"file overflow", []meta.Extent{rec(math.MaxUint64-1, 100, 2, W)}},
		{"file block 2^64-1", []meta.Extent{rec(math.MaxUint64, 100, 1, W)}},
		{"device overflow", []meta.Extent{rec(0, math.MaxUint64, 1, W)}},
		{"unknown state", []meta.Extent{rec(0, 100, 1, 7)}},
	} {
		m, err := Load(tc.records)
		if m != nil || !errors.Is(err, ErrCorrupt) || !errors.Is(err, meta.ErrCorrupt) || !errors.Is(err, syscall.EUCLEAN) {
			t.Errorf("%s: Load = %v, %v; want ErrCorrupt", tc.name, m, err)
		}
	}

	// Mergeable records keep their boundaries (the record mirror starts
	// from them). A mutation normalizes only its window: the range it
	// changes and the extents touching it.
	m, err := Load([]meta.Extent{rec(4, 104, 4, W), rec(0, 100, 4, W), rec(20, 300, 2, U)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmtExts(m.Extents()), "0+4@100 W; 4+4@104 W; 20+2@300 U"; got != want {
		t.Fatalf("Load: %q, want %q", got, want)
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	r := &logRec{}
	if err := m.Insert(parseExt("8+2@108 W"), r); err != nil {
		t.Fatal(err)
	}
	if got, want := fmtExts(m.Extents()), "0+4@100 W; 4+6@104 W; 20+2@300 U"; got != want {
		t.Errorf("after Insert: %q, want %q", got, want)
	}
	if want := []string{"put 4+6@104 W"}; !slices.Equal(r.log, want) {
		t.Errorf("records %q, want %q", r.log, want)
	}
	r.log = nil
	m.Unconvert(2, 4, r)
	m.Convert(2, 4, 0, r)
	if got, want := fmtExts(m.Extents()), "0+10@100 W; 20+2@300 U"; got != want {
		t.Errorf("after Unconvert+Convert: %q, want %q", got, want)
	}
	want := []string{
		"put 0+2@100 W", "put 2+4@102 U", "del 4", "put 6+4@106 W", // Unconvert
		"put 0+10@100 W", "del 2", "del 6", // Convert
	}
	if !slices.Equal(r.log, want) {
		t.Errorf("records %q, want %q", r.log, want)
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestMarkDurableIndex checks that MarkDurable finds pending extents
// through the epoch index: with many durable extents and one pending, it
// touches only the pending one.
func TestMarkDurableIndex(t *testing.T) {
	m := New()
	for i := range uint64(10000) {
		if err := m.Insert(Extent{FileBlock: 2 * i, DevBlock: 3 * i, Len: 1, State: meta.Written}, nil); err != nil {
			t.Fatal(err)
		}
	}
	m.Insert(Extent{FileBlock: 99999, DevBlock: 99999, Len: 1, State: meta.Written, Epoch: 9}, nil)
	r := &logRec{}
	m.MarkDurable(8, r)
	if len(r.log) != 0 || !m.Pending() {
		t.Fatalf("MarkDurable(8): %q", r.log)
	}
	m.MarkDurable(9, r)
	if want := []string{"put 99999+1@99999 W"}; !slices.Equal(r.log, want) || m.Pending() {
		t.Fatalf("MarkDurable(9): %q, want %q", r.log, want)
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestLookupAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	m := New()
	for i := range uint64(1000) {
		m.Insert(Extent{FileBlock: 3 * i, DevBlock: 5 * i, Len: 2, State: meta.Written}, nil)
	}
	out := make([]Segment, 0, 64)
	if n := testing.AllocsPerRun(100, func() { out = m.Lookup(100, 30, out[:0]) }); n != 0 {
		t.Errorf("Lookup allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(100, func() { m.MarkDurable(100, nil) }); n != 0 {
		t.Errorf("MarkDurable with nothing pending allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(100, func() { m.Convert(0, 50, 0, nil) }); n != 0 {
		t.Errorf("Convert with nothing to do allocates %v times per call", n)
	}
	// A conversion made durable, and unconverted again: no remap, so no
	// Remappings to allocate.
	m.Unconvert(300, 2, nil)
	epoch := uint64(0)
	if n := testing.AllocsPerRun(100, func() {
		epoch++
		m.Convert(300, 2, epoch, nil)
		if m.MarkDurable(epoch, nil) != nil || m.Unconvert(300, 2, nil) != nil {
			t.Fatal("Remappings without a remap")
		}
	}); n != 0 {
		t.Errorf("Convert, MarkDurable and Unconvert allocate %v times per cycle", n)
	}
}

func TestErrorText(t *testing.T) {
	err := New().Insert(Extent{FileBlock: 1}, nil)
	var e *Error
	if !errors.As(err, &e) || e.Op != "insert" {
		t.Fatalf("%v is not an *Error from insert", err)
	}
	if got := err.Error(); !strings.Contains(got, "extmap: insert") || !strings.Contains(got, "invalid extent") {
		t.Errorf("error text %q", got)
	}
}
