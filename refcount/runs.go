package refcount

import "github.com/google/btree"

// runs maps device blocks to values of type V, as maximal runs: disjoint,
// non-empty, and no two runs that touch hold equal values. A block no run
// covers has no value. Every update reports the runs it creates, changes or
// removes, by start block, so that a caller can mirror them as records.
type runs[V comparable] struct {
	tree *btree.BTreeG[run[V]]
	// old and new are scratch for update.
	old, new []run[V]
}

type run[V comparable] struct {
	start, n uint64
	v        V
}

func (r run[V]) end() uint64 { return r.start + r.n }

func newRuns[V comparable]() runs[V] {
	return runs[V]{tree: btree.NewG(16, func(a, b run[V]) bool { return a.start < b.start })}
}

// overlapping calls fn for every run that overlaps [lo, hi), in order,
// until fn returns false.
func (m *runs[V]) overlapping(lo, hi uint64, fn func(run[V]) bool) {
	if lo >= hi {
		return
	}
	// The run that contains lo starts at or before it.
	from := lo
	m.tree.DescendLessOrEqual(run[V]{start: lo}, func(r run[V]) bool {
		if r.end() > lo {
			from = r.start
		}
		return false
	})
	m.tree.AscendGreaterOrEqual(run[V]{start: from}, func(r run[V]) bool {
		if r.start >= hi {
			return false
		}
		return fn(r)
	})
}

// update replaces the value of every block of [lo, hi) by f(old, had),
// where had says whether the block had a value; f returns the new value
// and whether the block keeps one. put and del receive the record changes:
// put(r) for a run created or changed, del(start) for a run that no longer
// starts at start. Either may be nil.
func (m *runs[V]) update(lo, hi uint64, f func(v V, had bool) (V, bool), put func(run[V]), del func(uint64)) {
	if lo >= hi {
		return
	}
	// The window: the runs overlapping [lo, hi) and the ones touching it.
	m.old = m.old[:0]
	wlo, whi := lo, hi
	if lo > 0 {
		wlo = lo - 1
	}
	if hi < ^uint64(0) {
		whi = hi + 1
	}
	m.overlapping(wlo, whi, func(r run[V]) bool {
		m.old = append(m.old, r)
		return true
	})
	m.new = m.new[:0]
	add := func(r run[V]) {
		if r.n == 0 {
			return
		}
		if k := len(m.new); k > 0 && m.new[k-1].end() == r.start && m.new[k-1].v == r.v {
			m.new[k-1].n += r.n
			return
		}
		m.new = append(m.new, r)
	}
	apply := func(s, e uint64, v V, had bool) {
		if nv, keep := f(v, had); keep {
			add(run[V]{start: s, n: e - s, v: nv})
		}
	}
	cur := lo
	for _, r := range m.old {
		if r.start < lo {
			add(run[V]{start: r.start, n: min(lo, r.end()) - r.start, v: r.v})
		}
		if s, e := max(lo, r.start), min(hi, r.end()); s < e {
			if cur < s {
				var zero V
				apply(cur, s, zero, false)
			}
			apply(s, e, r.v, true)
			cur = e
		}
		if r.end() > hi {
			if cur < hi {
				var zero V
				apply(cur, hi, zero, false)
				cur = hi
			}
			s := max(hi, r.start)
			add(run[V]{start: s, n: r.end() - s, v: r.v})
		}
	}
	if cur < hi {
		var zero V
		apply(cur, hi, zero, false)
	}
	// Diff by start block; old runs leave the tree before new ones enter.
	i, j := 0, 0
	for i < len(m.old) || j < len(m.new) {
		switch {
		case j == len(m.new) || (i < len(m.old) && m.old[i].start < m.new[j].start):
			m.tree.Delete(m.old[i])
			if del != nil {
				del(m.old[i].start)
			}
			i++
		case i == len(m.old) || m.new[j].start < m.old[i].start:
			if put != nil {
				put(m.new[j])
			}
			j++
		default:
			if m.old[i] != m.new[j] {
				m.tree.Delete(m.old[i])
				if put != nil {
					put(m.new[j])
				}
			}
			i++
			j++
		}
	}
	for _, r := range m.new {
		m.tree.ReplaceOrInsert(r)
	}
	if cap(m.old) > 1024 {
		m.old = nil
	}
	if cap(m.new) > 1024 {
		m.new = nil
	}
}

// all returns every run, in order.
func (m *runs[V]) all() []run[V] {
	out := make([]run[V], 0, m.tree.Len())
	m.tree.Ascend(func(r run[V]) bool {
		out = append(out, r)
		return true
	})
	return out
}
