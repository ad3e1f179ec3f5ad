package crashtest

import (
	"fmt"
	"math/rand/v2"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/memdev"
)

// Script runs an explicit op sequence on one worker (deterministic) and
// crashes it exhaustively: targeted crash tests are scripts.
type Script struct {
	Env *Env
	w   *worker
	// marks[i] is the number of metadata commits after op i.
	marks []uint64
	cfg   EnvConfig
}

// NewScript starts a script on a new file system.
func NewScript(cfg EnvConfig) (*Script, error) {
	cfg.ensureDefaults()
	cfg.Options.EnsureDefaults()
	env, err := NewEnv(cfg)
	if err != nil {
		return nil, err
	}
	sh := &shared{fs: env.FS, blockSize: int64(cfg.BlockSize), maxFileBytes: 1 << 30, ioUnit: int64(cfg.IOUnit)}
	s := &Script{Env: env, w: newWorker(sh, 0, "/", 1, newModel(namespace{})), cfg: cfg}
	c, _ := env.KV.Commits()
	s.marks = []uint64{c}
	return s, nil
}

// Do runs ops in order.
func (s *Script) Do(ops ...Op) error {
	for _, op := range ops {
		if err := s.w.run(op); err != nil {
			return err
		}
		c, _ := s.Env.KV.Commits()
		s.marks = append(s.marks, c)
	}
	return nil
}

// Ops returns the ops run so far.
func (s *Script) Ops() []Op { return s.w.log }

// CrashResult is one crash of CrashAll.
type CrashResult struct {
	// Desc says which metadata was kept and the fate of each pending write.
	Desc     string
	Problems []Problem
	// FS is the recovered file system (closed after the callback returns),
	// nil if it could not be opened.
	FS *sluice.FS
	// Pre is the Check report of the volume before orphan recovery.
	Pre *sluice.CheckReport
}

// CrashAll crashes the script's file system in many ways and checks each
// crash against the model; each, if not nil, then sees the recovered file
// system. The ways: every combination of fates (drop, keep, and two tears:
// even sectors, odd sectors) of the pending device writes (sampled,
// deterministically, when there are more than maxFates combinations),
// each with the metadata as synced, all of it, and as after up to
// maxMeta-2 ops in between.
func (s *Script) CrashAll(maxFates, maxMeta int, each func(r *CrashResult)) (crashes int, failed int) {
	pending := s.Env.Mem.Pending()
	choices := make([][]memdev.Fate, len(pending))
	total := 1
	for i, p := range pending {
		fs := []memdev.Fate{{Kind: memdev.Drop}, {Kind: memdev.Keep}}
		if n := p.Sectors(); n > 1 {
			even, odd := make([]bool, n), make([]bool, n)
			for j := range n {
				even[j], odd[j] = j%2 == 0, j%2 == 1
			}
			fs = append(fs, memdev.Fate{Kind: memdev.Tear, Sectors: even}, memdev.Fate{Kind: memdev.Tear, Sectors: odd})
		}
		choices[i] = fs
		if total <= maxFates {
			total *= len(fs)
		}
	}
	var combos [][]int
	if total <= maxFates {
		idx := make([]int, len(choices))
		for {
			combos = append(combos, append([]int(nil), idx...))
			i := 0
			for ; i < len(idx); i++ {
				idx[i]++
				if idx[i] < len(choices[i]) {
					break
				}
				idx[i] = 0
			}
			if i == len(idx) {
				break
			}
		}
	} else {
		rng := rand.New(rand.NewPCG(1, 2))
		for range maxFates {
			c := make([]int, len(choices))
			for i := range c {
				c[i] = rng.IntN(len(choices[i]))
			}
			combos = append(combos, c)
		}
	}
	commits, synced := s.Env.KV.Commits()
	ks := []uint64{synced}
	for _, m := range s.marks {
		if m > synced && m != ks[len(ks)-1] {
			ks = append(ks, m)
		}
	}
	if ks[len(ks)-1] != commits {
		ks = append(ks, commits)
	}
	if len(ks) > maxMeta && maxMeta >= 2 {
		thin := []uint64{ks[0]}
		for i := 1; i <= maxMeta-2; i++ {
			thin = append(thin, ks[i*(len(ks)-1)/(maxMeta-1)])
		}
		ks = append(thin, ks[len(ks)-1])
	}
	snap := s.w.m.snapshot()
	for _, k := range ks {
		j := 0
		for i, c := range s.marks {
			if c <= k {
				j = i
			}
		}
		var ns namespace
		for _, st := range s.w.m.nsLog {
			if st.op <= j {
				ns = st.ns
			}
		}
		cands := []namespace{ns}
		if s.marks[j] < k && j+1 < len(s.marks) {
			for _, st := range s.w.m.nsLog {
				if st.op == j+1 {
					cands = append(cands, st.ns)
				}
			}
		}
		for _, combo := range combos {
			desc := fmt.Sprintf("metadata: %d of %d commits (%d synced); device:", k, commits, synced)
			for i, c := range combo {
				desc += fmt.Sprintf(" [%d +%d]=%v", pending[i].Off, len(pending[i].Data), choices[i][c])
			}
			fate := func(w memdev.PendingWrite) memdev.Fate {
				for i, p := range pending {
					if p.Seq == w.Seq {
						return choices[i][combo[i]]
					}
				}
				return memdev.Fate{Kind: memdev.Drop}
			}
			img, err := s.Env.Crash(0, fate, MetaCrash{UpTo: k})
			r := &CrashResult{Desc: desc}
			crashes++
			if err != nil {
				r.Problems = []Problem{{"reopen", err.Error()}}
			} else {
				exp := &expectation{files: expectFrom(snap, snap), roots: []string{"/"}, nsCands: map[string][]namespace{"/": cands}, owner: owners([]*worker{s.w})}
				next, pre, err := img.Open(s.Env.Opts)
				r.Pre = pre
				if pre != nil {
					for _, p := range pre.Problems {
						r.Problems = append(r.Problems, Problem{"check-before-recovery", p.String()})
					}
				}
				if err != nil {
					r.Problems = append(r.Problems, Problem{"reopen", err.Error()})
				} else {
					v := &verifier{fs: next.FS, exp: exp, bufferedEvery: 1}
					v.run()
					r.Problems = append(r.Problems, v.problems...)
					r.FS = next.FS
				}
				if each != nil {
					each(r)
				}
				if next != nil {
					next.Close()
				}
			}
			if len(r.Problems) > 0 {
				failed++
			}
		}
	}
	return crashes, failed
}

// Close closes the script's file system.
func (s *Script) Close() error { return s.Env.Close() }
