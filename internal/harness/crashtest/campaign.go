package crashtest

import (
	"runtime"
	"sync"
	"time"
)

// CampaignConfig is a run of many cases.
type CampaignConfig struct {
	// FirstSeed is the seed of the first case; cases take consecutive
	// seeds.
	FirstSeed uint64
	// Points is the number of crash points to check: the campaign runs
	// the first cases whose planned crash points add up to at least this.
	Points int
	// ConcurrentPct is the percentage of concurrent cases (DeriveConfig).
	ConcurrentPct int
	// Parallel is the number of cases run at once. The default value is
	// GOMAXPROCS.
	Parallel int
	// PebbleClonePct is every case's CaseConfig.PebbleClonePct.
	PebbleClonePct int
	// Etcd, when set, is every case's EnvConfig.Etcd: the campaign keeps
	// the metadata in etcd. The default value is nil: Pebble.
	Etcd *EtcdMeta
}

// CampaignResult sums up a campaign.
type CampaignResult struct {
	Cases, Points, Failed int
	// Stats sums what the crash points checked.
	Stats   Stats
	Elapsed time.Duration
}

// Plan returns the case configurations of a campaign, in seed order.
func (c CampaignConfig) Plan() []CaseConfig {
	var out []CaseConfig
	planned := 0
	for seed := c.FirstSeed; planned < c.Points; seed++ {
		cfg := DeriveConfig(seed, c.ConcurrentPct)
		cfg.PebbleClonePct = c.PebbleClonePct
		cfg.Env.Etcd = c.Etcd
		out = append(out, cfg)
		planned += cfg.Points * cfg.Generations
	}
	return out
}

// Campaign runs the cases of the plan, Parallel at a time, and calls each
// with every result (from one goroutine at a time).
func Campaign(c CampaignConfig, each func(*CaseResult)) CampaignResult {
	start := time.Now()
	par := c.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	plan := c.Plan()
	jobs := make(chan CaseConfig)
	var mu sync.Mutex
	var res CampaignResult
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cfg := range jobs {
				r := RunCase(cfg)
				mu.Lock()
				res.Cases++
				res.Points += r.Points
				res.Stats.add(r.Stats)
				if r.Failure != nil {
					res.Failed++
				}
				each(r)
				mu.Unlock()
			}
		}()
	}
	for _, cfg := range plan {
		jobs <- cfg
	}
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}
