package extmap

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/sluicefs/sluice/meta"
)

// TestDataDriven runs the scripts in testdata/script (rewrite the expected
// output with -rewrite). Extents are written as in parseExts and fmtExt:
// "FB+LEN@DEV S[EPOCH]", with " (was @OLD)" for a remapped extent, or
// " (was @OLD U)" if it remapped a pending conversion. Commands:
//
//	load                          Load the records listed in the input,
//	  FB+LEN@DEV W|U ...          one a line; shows the extents or the error
//	insert                        Insert each extent listed in the input,
//	  FB+LEN@DEV W|U[EPOCH] ...   one a line
//	convert fb=F n=N epoch=E      Convert
//	unconvert fb=F n=N            Unconvert
//	remap fb=F n=N dev=D epoch=E  Remap
//	mark-durable upto=E           MarkDurable
//	remove fb=F n=N               Remove
//	collapse fb=F n=N             CollapseRange
//	insert-range fb=F n=N         InsertRange
//	show                          the extents
//
// A mutation shows the records it reports ("put" the persisted record,
// "del" its key), what it returns, and the extents after it. After every
// command the replayed records must equal the persisted forms of the
// extents (the record mirror), and Check runs: its error, if any, is shown.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/script", func(t *testing.T, path string) {
		m := New()
		mirror := map[uint64]meta.Extent{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) uint64 {
				var v uint64
				d.ScanArgs(t, key, &v)
				return v
			}
			r := &mirrorRec{mirror: mirror}
			var ret string
			switch d.Cmd {
			case "load":
				var recs []meta.Extent
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					e := parseExt(line)
					recs = append(recs, meta.Extent{FileBlock: e.FileBlock, DevBlock: e.DevBlock, Len: e.Len, State: e.State})
				}
				loaded, err := Load(recs)
				if err != nil {
					return fmt.Sprintf("error: %v\n", err)
				}
				m = loaded
				clear(mirror)
				for _, rec := range recs {
					mirror[rec.FileBlock] = rec
				}
			case "insert":
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					if err := m.Insert(parseExt(line), r); err != nil {
						r.log = append(r.log, fmt.Sprintf("error: %v", err))
					}
				}
			case "convert":
				m.Convert(arg("fb"), arg("n"), arg("epoch"), r)
			case "unconvert":
				ret = fmtRemappings(m.Unconvert(arg("fb"), arg("n"), r))
			case "remap":
				released, err := m.Remap(arg("fb"), arg("n"), arg("dev"), arg("epoch"), r)
				ret = fmtRanges(released)
				if err != nil {
					ret = fmt.Sprintf("error: %v (released %s)", err, ret)
				}
			case "mark-durable":
				ret = fmtRemappings(m.MarkDurable(arg("upto"), r))
			case "remove":
				ret = fmtRanges(m.Remove(arg("fb"), arg("n"), r))
			case "collapse":
				ret = fmtRanges(m.CollapseRange(arg("fb"), arg("n"), r))
			case "insert-range":
				ret = fmt.Sprint(m.InsertRange(arg("fb"), arg("n"), r))
			case "show":
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			want := map[uint64]meta.Extent{}
			for _, e := range m.Extents() {
				want[e.FileBlock] = e.Persisted()
			}
			if !maps.Equal(mirror, want) {
				d.Fatalf(t, "record mirror differs:\nreplayed %v\nwant     %v", sortedRecords(mirror), sortedRecords(want))
			}
			var b strings.Builder
			for _, l := range r.log {
				fmt.Fprintln(&b, l)
			}
			if ret != "" {
				fmt.Fprintf(&b, "returned %s\n", ret)
			}
			fmt.Fprintf(&b, "extents: %s\n", fmtExts(m.Extents()))
			if err := m.Check(); err != nil {
				fmt.Fprintf(&b, "check: %v\n", err)
			}
			return b.String()
		})
	})
}

// mirrorRec logs Recorder calls as logRec does and replays them into a
// record map.
type mirrorRec struct {
	logRec
	mirror map[uint64]meta.Extent
}

func (r *mirrorRec) Put(e Extent) {
	r.logRec.Put(e)
	r.mirror[e.FileBlock] = e.Persisted()
}

func (r *mirrorRec) Delete(fb uint64) {
	r.logRec.Delete(fb)
	delete(r.mirror, fb)
}

// fmtRanges formats device ranges as "START+LEN ...", or "nil".
func fmtRanges(rs []DevRange) string {
	if rs == nil {
		return "nil"
	}
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%d+%d", r.Start, r.Len))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// fmtRemappings formats remappings as "OLD+LEN->NEW ...", with
// "OLD+LEN(U)->NEW" where the old record said Unwritten, or "nil".
func fmtRemappings(rs []Remapping) string {
	if rs == nil {
		return "nil"
	}
	var parts []string
	for _, r := range rs {
		if r.Old.Len != r.New.Len {
			parts = append(parts, fmt.Sprintf("%v->%v (lengths differ)", r.Old, r.New))
			continue
		}
		u := ""
		if r.OldUnwritten {
			u = "(U)"
		}
		parts = append(parts, fmt.Sprintf("%d+%d%s->%d", r.Old.Start, r.Old.Len, u, r.New.Start))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
