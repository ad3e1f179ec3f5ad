package ring

import (
	"testing"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/faultdev"
)

// Seed 002: punted direct writes to one inode run in parallel when the file
// takes parallel direct writes, one at a time (a chain on one worker)
// otherwise.
func TestHashedDirectWritesOneInode(t *testing.T) {
	const n = 8
	noPDW := sluice.Concurrent()
	noPDW.ParallelDirectWrites = false
	for _, tc := range []struct {
		name string
		pol  sluice.Policy
		want int // direct writes in flight at once
	}{
		{"concurrent", sluice.Concurrent(), n},
		{"classic", sluice.Classic(), 1},
		{"concurrent-without-ParallelDirectWrites", noPDW, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.pol)
			data := e.prewrite("/f", n*4096, 1)
			f := e.open("/f", sluice.O_DIRECT)
			if got := f.ParallelDirectWrites(); got != (tc.want == n) {
				t.Fatalf("ParallelDirectWrites() = %v", got)
			}
			e.fault.ResetStats()
			g := e.gate(faultdev.Writes)
			r := e.ring(n, &Options{ForceAsync: true})
			for i := 0; i < n; i++ {
				p := pattern(4096, byte(10+i))
				copy(data[i*4096:], p)
				if err := r.Write(f, p, int64(i)*4096, 0, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			// Forced punts are queued by the time Submit returns.
			st := r.Stats()
			if tc.want == n {
				if st.HashedPunts != 0 || st.HashedWaits != 0 {
					t.Fatalf("parallel writes were hashed: %v", st)
				}
			} else if st.HashedPunts != n || st.HashedWaits != n-1 {
				t.Fatalf("want %d hashed punts, %d behind the chain: %v", n, n-1, st)
			}
			gateHeld(t, g, tc.want)
			waitFor(t, "blocked workers", func() bool { return r.Stats().WorkersBlocked == int64(tc.want) })
			if in := e.fault.Stats().Write.InFlight; in != int64(tc.want) {
				t.Fatalf("%d writes in flight, want %d", in, tc.want)
			}
			// Hashed: each write reaches the device only after the one
			// before it completed.
			for i := 1; i < n && tc.want == 1; i++ {
				g.Release(1)
				gateHeld(t, g, 1)
				if in := e.fault.Stats().Write.InFlight; in != 1 {
					t.Fatalf("after %d releases: %d writes in flight", i, in)
				}
			}
			g.Open()
			for _, c := range reap(t, r, n) {
				if c.Err != nil || c.Res != 4096 || c.Flags&CQEPunted == 0 {
					t.Fatalf("write %d: %+v", c.Tag, c)
				}
				if hw := c.Flags&CQEHashWaited != 0; hw != (tc.want == 1 && c.Tag != 0) {
					t.Fatalf("write %d: hash-waited flag %v", c.Tag, hw)
				}
			}
			if m := e.fault.Stats().Write.MaxInFlight; m != int64(tc.want) {
				t.Fatalf("max writes in flight %d, want %d", m, tc.want)
			}
			if st := r.Stats(); st.WorkersBlockedPeak != int64(tc.want) {
				t.Fatalf("peak blocked workers %d, want %d", st.WorkersBlockedPeak, tc.want)
			}
			got := make([]byte, len(data))
			if _, err := f.Pread(got, 0, 0); err != nil {
				t.Fatal(err)
			}
			checkBytes(t, "file", got, data)
		})
	}
}

// Chains of different inodes never wait for each other: hashed writes to
// three files run three at a time, one per file.
func TestHashedChainsOfDifferentInodes(t *testing.T) {
	const files, per = 3, 4
	e := newEnv(t, sluice.Classic())
	var fs []*sluice.File
	for i := 0; i < files; i++ {
		path := "/f" + string(rune('0'+i))
		e.prewrite(path, per*4096, byte(i))
		fs = append(fs, e.open(path, sluice.O_DIRECT))
	}
	e.fault.ResetStats()
	g := e.gate(faultdev.Writes)
	r := e.ring(files*per, &Options{ForceAsync: true})
	for j := 0; j < per; j++ {
		for i, f := range fs {
			if err := r.Write(f, pattern(4096, byte(j)), int64(j)*4096, 0, uint64(i*per+j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := r.Stats(); st.HashedWaits != files*(per-1) {
		t.Fatalf("hashed waits %d, want %d", st.HashedWaits, files*(per-1))
	}
	gateHeld(t, g, files)
	waitFor(t, "one blocked worker per chain", func() bool { return r.Stats().WorkersBlocked == files })
	if in := e.fault.Stats().Write.InFlight; in != files {
		t.Fatalf("%d writes in flight, want %d", in, files)
	}
	g.Open()
	for _, c := range reap(t, r, files*per) {
		if c.Err != nil || c.Res != 4096 {
			t.Fatalf("write %d: %+v", c.Tag, c)
		}
	}
	if m := e.fault.Stats().Write.MaxInFlight; m != files {
		t.Fatalf("max writes in flight %d, want %d", m, files)
	}
}

// One inode's stuck chain does not hold up another inode's chain.
func TestHashedChainDoesNotBlockOtherInode(t *testing.T) {
	e := newEnv(t, sluice.Classic())
	e.prewrite("/a", 4*4096, 1)
	e.prewrite("/b", 4*4096, 2)
	a := e.open("/a", sluice.O_DIRECT)
	b := e.open("/b", sluice.O_DIRECT)
	// Hold the first write to reach the device: /a's first.
	g := e.gate(faultdev.Nth(1, faultdev.Writes))
	r := e.ring(8, &Options{ForceAsync: true})
	for j := 0; j < 3; j++ {
		if err := r.Write(a, pattern(4096, 1), int64(j)*4096, 0, uint64(j)); err != nil {
			t.Fatal(err)
		}
	}
	gateHeld(t, g, 1)
	for j := 0; j < 3; j++ {
		if err := r.Write(b, pattern(4096, 2), int64(j)*4096, 0, uint64(10+j)); err != nil {
			t.Fatal(err)
		}
	}
	// /b's three writes complete while /a's chain is stuck on its first.
	for _, c := range reap(t, r, 3) {
		if c.Tag < 10 || c.Err != nil {
			t.Fatalf("unexpected completion while /a is held: %+v", c)
		}
	}
	g.Open()
	for _, c := range reap(t, r, 3) {
		if c.Tag >= 10 || c.Err != nil {
			t.Fatalf("unexpected completion: %+v", c)
		}
	}
}

// The collision case. Chains are keyed by inode number: files of two file
// systems with the same inode number, submitted to one ring, share a chain
// and are serialised against each other (correct, only slower).
func TestHashedSameInoTwoFileSystems(t *testing.T) {
	e1 := newEnv(t, sluice.Classic())
	e2 := newEnv(t, sluice.Classic())
	e1.prewrite("/f", 2*4096, 1)
	e2.prewrite("/f", 2*4096, 2)
	f1 := e1.open("/f", sluice.O_DIRECT)
	f2 := e2.open("/f", sluice.O_DIRECT)
	if f1.Ino() != f2.Ino() {
		t.Skipf("inode numbers differ (%d, %d): no collision to test", f1.Ino(), f2.Ino())
	}
	g1 := e1.gate(faultdev.Writes)
	g2 := e2.gate(faultdev.Writes)
	r := e1.ring(4, &Options{ForceAsync: true})
	e2.t.Cleanup(func() { e2.openGates() })
	for i, f := range []*sluice.File{f1, f2, f1, f2} {
		if err := r.Write(f, pattern(4096, byte(i)), int64(i/2)*4096, 0, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.Stats(); st.HashedWaits != 3 {
		t.Fatalf("the two inodes do not share a chain: %v", st)
	}
	waitFor(t, "the chain's first write", func() bool { return g1.Held()+g2.Held() == 1 })
	if g2.Held() != 0 {
		t.Fatal("the second file system's write ran first")
	}
	// Release one write at a time: the next reaches a device only after
	// it, never two at once.
	for i := 1; i <= 4; i++ {
		if g1.Held() == 1 {
			g1.Release(1)
		} else {
			g2.Release(1)
		}
		waitFor(t, "the next write", func() bool {
			return g1.Held()+g2.Held() == 1 || i == 4
		})
		if h := g1.Held() + g2.Held(); h > 1 {
			t.Fatalf("%d writes held at once", h)
		}
	}
	g1.Open()
	g2.Open()
	for _, c := range reap(t, r, 4) {
		if c.Err != nil || c.Res != 4096 {
			t.Fatalf("write %d: %+v", c.Tag, c)
		}
	}
	if m := e1.fault.Stats().Write.MaxInFlight + e2.fault.Stats().Write.MaxInFlight; m > 2 {
		t.Fatalf("max in flight %d", m)
	}
}

// Reads are never hashed: a punted read of an inode whose write chain is
// stuck runs on another worker at once.
func TestUnhashedReadBypassesChain(t *testing.T) {
	// Hashed writes, but direct reads under the shared lock (classic
	// direct reads would drain the held write).
	pol := sluice.Concurrent()
	pol.ParallelDirectWrites = false
	e := newEnv(t, pol)
	data := e.prewrite("/f", 4*4096, 1)
	f := e.open("/f", sluice.O_DIRECT)
	g := e.gate(faultdev.Writes)
	r := e.ring(4, &Options{ForceAsync: true})
	for j := 0; j < 2; j++ {
		if err := r.Write(f, pattern(4096, 9), int64(j)*4096, 0, uint64(j)); err != nil {
			t.Fatal(err)
		}
	}
	gateHeld(t, g, 1)
	buf := pattern(4096, 0)
	if err := r.Read(f, buf, 3*4096, 0, 7); err != nil {
		t.Fatal(err)
	}
	c := reap(t, r, 1)[0]
	if c.Tag != 7 || c.Err != nil || c.Res != 4096 || c.Flags&CQEPunted == 0 {
		t.Fatalf("read: %+v", c)
	}
	checkBytes(t, "read", buf, data[3*4096:])
	g.Open()
	reap(t, r, 2)
}

// Buffered writes (and fallocate, truncate) of a file that is not
// O_DIRECT are hashed even under the concurrent policy.
func TestBufferedWritesAlwaysHashed(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	f := e.open("/f", 0)
	r := e.ring(8, &Options{ForceAsync: true})
	for j := 0; j < 4; j++ {
		if err := r.Write(f, pattern(100, byte(j)), int64(j)*100, 0, uint64(j)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Fallocate(f, 0, 0, 8192, 4); err != nil {
		t.Fatal(err)
	}
	if err := r.Truncate(f, 300, 5); err != nil {
		t.Fatal(err)
	}
	for _, c := range reap(t, r, 6) {
		if c.Err != nil {
			t.Fatalf("op %d: %+v", c.Tag, c)
		}
	}
	if st := r.Stats(); st.HashedPunts != 6 {
		t.Fatalf("hashed punts %d, want 6: %v", st.HashedPunts, st)
	}
	if a, _ := f.Stat(); a.Size != 300 {
		t.Fatalf("size %d, want 300 (ops ran out of order?)", a.Size)
	}
}
