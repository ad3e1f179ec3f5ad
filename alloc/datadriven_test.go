package alloc

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the scripts in testdata/ (rewrite the expected output
// with -rewrite). Commands:
//
//	new first=F end=E                  a fresh Allocator, shown
//	load first=F end=E                 Load from the records listed in the
//	  [s,e) ...                        input, one or more per line; shown
//	alloc hint=H want=W [reserved]     Alloc or AllocReserved
//	free start=S len=L seq=Q           Free
//	cancel start=S len=L               Cancel
//	unbusy seq=Q                       Unbusy
//	reserve n=N / unreserve n=N        Reserve / Unreserve
//	changes                            the journal since the last changes
//	show                               free, allocatable and busy extents, stats
//
// Check runs after every command.
func TestDataDriven(t *testing.T) {
	var a *Allocator
	datadriven.RunTest(t, "testdata/alloc", func(t *testing.T, d *datadriven.TestData) string {
		var out string
		switch d.Cmd {
		case "new":
			var first, end BlockNum
			d.ScanArgs(t, "first", &first)
			d.ScanArgs(t, "end", &end)
			a = New(first, end)
			out = show(a)
		case "load":
			var first, end BlockNum
			d.ScanArgs(t, "first", &first)
			d.ScanArgs(t, "end", &end)
			recs, err := parseExtents(d.Input)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			b, err := Load(first, end, recs)
			if err != nil {
				return fmt.Sprintf("error: %v", err)
			}
			a = b
			out = show(a)
		case "alloc":
			var hint BlockNum
			var want uint64
			d.ScanArgs(t, "hint", &hint)
			d.ScanArgs(t, "want", &want)
			var e Extent
			var err error
			if d.HasArg("reserved") {
				e, err = a.AllocReserved(hint, want)
			} else {
				e, err = a.Alloc(hint, want)
			}
			if err != nil {
				out = fmt.Sprintf("error: %v", err)
			} else {
				out = e.String()
			}
		case "free", "cancel":
			var e Extent
			var seq uint64
			d.ScanArgs(t, "start", &e.Start)
			d.ScanArgs(t, "len", &e.Len)
			var err error
			if d.Cmd == "free" {
				d.ScanArgs(t, "seq", &seq)
				err = a.Free(e, seq)
			} else {
				err = a.Cancel(e)
			}
			out = errString(err)
		case "unbusy":
			var seq uint64
			d.ScanArgs(t, "seq", &seq)
			a.Unbusy(seq)
			out = "ok"
		case "reserve", "unreserve":
			var n uint64
			d.ScanArgs(t, "n", &n)
			if d.Cmd == "reserve" {
				out = errString(a.Reserve(n))
			} else {
				out = errString(a.Unreserve(n))
			}
		case "changes":
			var b strings.Builder
			a.Changes(func(e Extent) { fmt.Fprintf(&b, "put %v\n", e) },
				func(s BlockNum) { fmt.Fprintf(&b, "del %d\n", s) })
			out = b.String()
			if out == "" {
				out = "(none)"
			}
		case "show":
			out = show(a)
		default:
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		if a != nil {
			if err := a.Check(); err != nil {
				d.Fatalf(t, "check: %v", err)
			}
		}
		return out
	})
}

func errString(err error) string {
	if err != nil {
		return fmt.Sprintf("error: %v", err)
	}
	return "ok"
}

// show prints a's free, allocatable and busy extents and its stats.
func show(a *Allocator) string {
	a.mu.Lock()
	var b strings.Builder
	b.WriteString("free:")
	a.mu.free.Ascend(func(e Extent) bool { fmt.Fprintf(&b, " %v", e); return true })
	b.WriteString("\nallocatable:")
	a.mu.avail.Ascend(func(e Extent) bool { fmt.Fprintf(&b, " %v", e); return true })
	b.WriteString("\nbusy:")
	a.mu.busy.byStart.Ascend(func(e busyExtent) bool { fmt.Fprintf(&b, " %v", e); return true })
	a.mu.Unlock()
	st := a.Stats()
	fmt.Fprintf(&b, "\nblocks: total %d free %d busy %d allocatable %d reserved %d available %d\n",
		st.TotalBlocks, st.FreeBlocks, st.BusyBlocks, st.AllocatableBlocks, st.ReservedBlocks, st.AvailableBlocks)
	return b.String()
}

// parseExtents parses extents written as "[start,end)", separated by
// white space.
func parseExtents(s string) ([]Extent, error) {
	var out []Extent
	for _, f := range strings.Fields(s) {
		inner, ok := strings.CutPrefix(f, "[")
		inner, ok2 := strings.CutSuffix(inner, ")")
		lo, hi, ok3 := strings.Cut(inner, ",")
		if !ok || !ok2 || !ok3 {
			return nil, fmt.Errorf("bad extent %q, want [start,end)", f)
		}
		start, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, err
		}
		end, err := strconv.ParseUint(hi, 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, Extent{Start: BlockNum(start), Len: end - start})
	}
	return out, nil
}
