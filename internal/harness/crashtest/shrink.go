package crashtest

import (
	"slices"
)

// Shrink returns a shortest-found sub-sequence of ops that still fails on a
// fresh file system of cfg: an op fails (a workload error), or one of the
// crashes Script.CrashAll tries (at most maxFates fate combinations and
// maxMeta metadata prefixes) shows a problem for which match returns true.
// Ops that refer to handles or names a removed op would have made are
// skipped when they run, so any sub-sequence is valid. It removes chunks of
// halving size until no single op can go (delta debugging, simplified);
// logf, if not nil, reports progress.
func Shrink(cfg EnvConfig, ops []Op, maxFates, maxMeta int, match func(Problem) bool, logf func(string, ...any)) []Op {
	fails := func(ops []Op) bool {
		s, err := NewScript(cfg)
		if err != nil {
			return false
		}
		defer s.Close()
		if err := s.Do(ops...); err != nil {
			return match(Problem{Kind: "live", Detail: err.Error()})
		}
		found := false
		s.CrashAll(maxFates, maxMeta, func(r *CrashResult) {
			for _, p := range r.Problems {
				found = found || match(p)
			}
		})
		return found
	}
	if !fails(ops) {
		if logf != nil {
			logf("shrink: the %d ops do not fail on their own (the failure needs the crash the campaign chose, or an earlier generation)", len(ops))
		}
		return ops
	}
	for chunk := len(ops) / 2; chunk >= 1; {
		removed := false
		for i := 0; i+chunk <= len(ops); {
			try := slices.Concat(ops[:i], ops[i+chunk:])
			if fails(try) {
				ops = try
				removed = true
				if logf != nil {
					logf("shrink: %d ops", len(ops))
				}
				continue
			}
			i += chunk
		}
		if !removed {
			chunk /= 2
		}
	}
	return ops
}
