package ring

import (
	"testing"

	"github.com/sluicefs/sluice"
)

// TestDontCache: the ring passes sluice.RWFDontCache through, inline and
// punted: uncached reads leave no page cached (whether the read arms a
// retry on its page or a worker blocks on it), and uncached writes'
// pages go once the writeback they start ends.
func TestDontCache(t *testing.T) {
	const n = 8
	for _, tc := range readPaths {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.pol)
			data := e.prewrite("/f", 2*n*4096, 3)
			f := e.open("/f", 0)
			r := e.ring(n, nil)
			bufs := make([][]byte, n)
			for i := range bufs {
				bufs[i] = make([]byte, 4096)
				if err := r.Read(f, bufs[i], int64(2*i)*4096, sluice.RWFDontCache, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range reap(t, r, n) {
				if c.Err != nil || c.Res != 4096 {
					t.Fatalf("read %d: %d %v", c.Tag, c.Res, c.Err)
				}
				checkBytes(t, "uncached read", bufs[c.Tag], data[2*c.Tag*4096:(2*c.Tag+1)*4096])
			}
			cv := e.fs.Counters()
			if cv["CachePages"] != 0 || cv["DontCacheDropped"] != n {
				t.Fatalf("after %d uncached reads: %d pages cached, DontCacheDropped %d", n, cv["CachePages"], cv["DontCacheDropped"])
			}
			w := e.open("/w", 0)
			for i := 0; i < n; i++ {
				if err := r.Write(w, data[i*4096:(i+1)*4096], int64(i)*4096, sluice.RWFDontCache, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range reap(t, r, n) {
				if c.Err != nil || c.Res != 4096 {
					t.Fatalf("write %d: %d %v", c.Tag, c.Res, c.Err)
				}
			}
			if err := e.fs.SyncAll(); err != nil { // waits for the writebacks the writes started
				t.Fatal(err)
			}
			cv = e.fs.Counters()
			if cv["CachePages"] != 0 || cv["DontCacheDropped"] != 2*n {
				t.Fatalf("after %d uncached writes: %d pages cached, DontCacheDropped %d", n, cv["CachePages"], cv["DontCacheDropped"])
			}
			got := make([]byte, n*4096)
			if _, err := w.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			checkBytes(t, "uncached writes read back", got, data[:n*4096])
		})
	}
}
