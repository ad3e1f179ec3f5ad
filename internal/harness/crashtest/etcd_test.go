package crashtest

// The crash campaign on the etcd backend, and the etcd members' own crash:
// one real three-member cluster in the test process (etcdtest), started by
// the first test that needs it; every volume and crash image under a key
// prefix of its own.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/meta/etcdkv/etcdtest"
)

var flagEtcdPoints = flag.Int("crashtest.etcdpoints", DefaultEtcdPoints, "number of crash points TestCampaignEtcd checks")

// etcdCluster runs with the limits sluice volumes need. TestMain closes
// it.
var etcdCluster = etcdtest.Lazy{Options: etcdtest.Options{MaxTxnOps: etcdkv.VolumeMaxTxnOps, MaxRequestBytes: etcdkv.VolumeMaxRequestBytes}}

// etcdNames counts etcdMeta's calls by name, so that a test run again
// (-count) uses new prefixes.
var etcdNames struct {
	sync.Mutex
	m map[string]int
}

func TestMain(m *testing.M) {
	code := m.Run()
	etcdCluster.Close()
	os.Exit(code)
}

// etcdMeta returns an EtcdMeta on etcdCluster whose volumes' prefixes
// begin with crashtest/name/ (crashtest/name.N/ from the second call
// with name on), their etcd calls bounded by timeout.
func etcdMeta(t *testing.T, name string, timeout time.Duration) *EtcdMeta {
	t.Helper()
	client := etcdCluster.Client(t) // one connection for every volume
	etcdNames.Lock()
	defer etcdNames.Unlock()
	if etcdNames.m == nil {
		etcdNames.m = map[string]int{}
	}
	n := etcdNames.m[name]
	etcdNames.m[name]++
	if n > 0 {
		name = fmt.Sprintf("%s.%d", name, n)
	}
	return &EtcdMeta{Client: client, Prefix: "crashtest/" + name + "/", RequestTimeout: timeout}
}

// campaignEtcdTimeout bounds each etcd call of TestCampaignEtcd's engines:
// long, so that a loaded machine does not make a commit fail.
const campaignEtcdTimeout = 30 * time.Second

// campaignLoseReplyEvery is TestCampaignEtcd's EtcdMeta.LoseReplyEvery:
// etcdkv resolves one commit in that many by its guard.
const campaignLoseReplyEvery = 16

// TestCampaignEtcd runs the crash campaign with the metadata in etcd
// (-crashtest.etcdpoints crash points, from the campaign's first seed on),
// or replays one case on etcd (-crashtest.seed).
func TestCampaignEtcd(t *testing.T) {
	m := etcdMeta(t, "campaign", campaignEtcdTimeout)
	m.LoseReplyEvery = campaignLoseReplyEvery
	if *flagSeed != 0 {
		replayCase(t, m)
		return
	}
	points := *flagEtcdPoints
	if testing.Short() {
		points = min(points, 12)
	}
	runCampaign(t, points, m)
	logEtcdStats(t, m)
}

// logEtcdStats logs what the volumes' KVs of m did, and fails t if no
// read was served by the read cache (it would be off: the volumes not
// owned) or a commit was refused for want of ownership.
func logEtcdStats(t *testing.T, m *EtcdMeta) {
	t.Helper()
	s := m.Stats()
	t.Logf("etcd: %d commits (%d commit requests, %d resent, %d resolved by the guard), %d reads, %d served by the read cache, %d conflicts, %d refused as not the owner",
		s.Commits, s.CommitRequests, s.Resent, s.Resolved, s.Reads, s.CacheHits, s.Conflicts, s.NotOwner)
	if s.Commits > 0 && s.CacheHits == 0 {
		t.Errorf("the read cache served no read: are the volumes owned?")
	}
	if s.NotOwner > 0 {
		t.Errorf("%d commits refused as not the owner", s.NotOwner)
	}
	if m.LoseReplyEvery != 0 && s.Commits >= 2*m.LoseReplyEvery && s.Resolved == 0 {
		t.Errorf("no commit was resolved by the guard, though the reply to one in %d was lost", m.LoseReplyEvery)
	}
}

// TestEtcdMemberCrash stops an etcd member in the middle of a
// single-worker workload, just before the engine sends a chosen commit,
// and restarts it later; the two other members keep the quorum:
//
//   - "follower-stop": a follower stops (gracefully);
//   - "leader-kill": the leader is killed (it stops without handing over),
//     and the commit waits until the others have elected a new one, so
//     that no commit is in flight at the kill;
//   - "leader-kill-commit-in-flight": the commit is sent while the leader
//     is being killed, to a cluster whose leader is dead and that may not
//     know it yet.
//
// Every commit that returned must be in etcd, at the revision it made
// (EtcdRecKV.checkHistory); the volume etcd holds then, with the data
// device as a crash leaves it, must pass every check of a crash point
// (fsck before and after recovery, the model, the accounting). The
// volume is owned, as a mount's is, so a commit in flight at the kill
// that gets no answer is sent again under the owner's guard and applies
// once (etcdkv's "Outcomes"): in every mode the workload must not notice.
// The test logs the commits etcdkv sent more than once, and how each was
// resolved. Should a commit fail all the same, the test logs whether etcd
// applied it and checks the volume as etcd holds it (fsck; the model's
// checks are logged only, for the op that failed may have committed part
// of its changes, a write of OpWriteParallel, say) before failing.
func TestEtcdMemberCrash(t *testing.T) {
	for _, mode := range []memberCrash{followerStop, leaderKill, leaderKillInFlight} {
		timeout := campaignEtcdTimeout
		if mode == leaderKillInFlight {
			// etcdkv's default: what a commit in doubt costs a user.
			timeout = etcdkv.DefaultRequestTimeout
		}
		t.Run(mode.String(), func(t *testing.T) { runMemberCrash(t, etcdMeta(t, mode.String(), timeout), mode) })
	}
}

// memberCrash is how TestEtcdMemberCrash stops a member.
type memberCrash int

const (
	followerStop memberCrash = iota
	leaderKill
	leaderKillInFlight
)

func (c memberCrash) String() string {
	return [...]string{"follower-stop", "leader-kill", "leader-kill-commit-in-flight"}[c]
}

// runMemberCrash is a case of TestEtcdMemberCrash.
func runMemberCrash(t *testing.T, m *EtcdMeta, mode memberCrash) {
	const (
		seed          = 3
		ops           = 140
		stopCommit    = 40
		restartCommit = 100
	)
	cluster := etcdCluster.Get(t)
	cfg := DeriveConfig(seed, 0)
	cfg.Ops = ops
	cfg.Env.Etcd = m
	cfg.ensureDefaults()
	env, err := NewEnv(cfg.Env)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { env.Close() }()
	rk := env.KV.(*EtcdRecKV)

	// The hook runs in the committing goroutine, under rk's mutex; the
	// test reads what it sets after setBeforeCommit(nil). Kill takes a
	// while (the member's servers close after its raft node stopped); in
	// leader-kill-commit-in-flight it runs beside the commit, and
	// stopDone says when the cluster may be driven again.
	stopped, restarted := -1, false
	var hookErrs []error
	var stoppedAt time.Time
	var nextCommit time.Duration
	stopDone := make(chan struct{})
	rk.setBeforeCommit(func(n uint64) {
		switch {
		case n == stopCommit:
			async := false
			defer func() {
				if !async {
					close(stopDone)
				}
			}()
			leader, err := cluster.WaitLeader()
			if err != nil {
				hookErrs = append(hookErrs, err)
				return
			}
			stopped, stoppedAt = leader, time.Now()
			switch mode {
			case followerStop:
				stopped = (leader + 1) % cluster.Members()
				cluster.Stop(stopped)
			case leaderKill:
				cluster.Kill(leader)
				if _, err := cluster.WaitLeader(); err != nil {
					hookErrs = append(hookErrs, err)
				}
			case leaderKillInFlight:
				async = true
				go func() {
					defer close(stopDone)
					cluster.Kill(leader)
				}()
			}
		case n == stopCommit+1 && stopped >= 0:
			nextCommit = time.Since(stoppedAt)
		case n == restartCommit && stopped >= 0:
			<-stopDone
			restarted = true
			if err := cluster.Restart(stopped); err != nil {
				hookErrs = append(hookErrs, err)
			}
		}
	})
	sh := &shared{fs: env.FS, blockSize: int64(cfg.Env.BlockSize), maxFileBytes: cfg.MaxFileBytes, ioUnit: int64(cfg.Env.IOUnit)}
	w := newWorker(sh, 0, "/", cfg.Seed, newModel(namespace{}))
	c0, _ := rk.Commits()
	marks := []uint64{c0}
	lastSync := 0
	var opErr error
	for op := 1; op <= ops; op++ {
		if opErr = w.step(); opErr != nil {
			break
		}
		c, _ := rk.Commits()
		marks = append(marks, c)
		if isSyncPoint(w, w.log[len(w.log)-1]) {
			lastSync = op
		}
	}
	rk.setBeforeCommit(nil)
	if stopped >= 0 {
		<-stopDone
	}
	t.Cleanup(func() {
		// Leave the cluster whole for the next test, whatever happened.
		if err := cluster.Restart(0, 1, 2); err != nil {
			t.Error(err)
		}
		if _, err := cluster.WaitLeader(); err != nil {
			t.Error(err)
		}
	})
	for _, err := range hookErrs {
		t.Errorf("driving the cluster: %v", err)
	}
	commits, _ := rk.Commits()
	if stopped < 0 {
		t.Fatalf("the workload made %d commits, and the member was to stop before commit %d", commits, stopCommit)
	}
	if !restarted {
		if err := cluster.Restart(stopped); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cluster.WaitLeader(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped member %d before commit %d, restarted it before commit %d; %d ops, %d commits; commit %d started %v after the stop began",
		stopped, stopCommit, restartCommit, len(w.log), commits, stopCommit+1, nextCommit)

	if err := rk.checkHistory(); err != nil {
		t.Errorf("a commit that returned is not in etcd as it was made: %v", err)
	}
	for _, c := range rk.resentCommits() {
		t.Logf("%v", c)
	}
	applied, err := rk.resolveFailed()
	if err != nil {
		t.Fatalf("what etcd holds: %v", err)
	}
	if opErr != nil {
		rk.mu.Lock()
		failed := rk.mu.failed
		rk.mu.Unlock()
		t.Errorf("the workload failed at op %d (the engine did not go on through the member's crash): %v", len(w.log), opErr)
		for _, f := range failed {
			t.Logf("commit %d (%d writes) failed: %v", f.after+1, len(f.writes), f.err)
		}
		t.Logf("etcd applied %d of the %d failed commits", len(applied), len(failed))
	}
	if len(applied) > 0 {
		// etcd holds a commit the engine was not told of: check the
		// volume (fsck); the model does not know what the failed op did.
		leaderKillFsck(t, env, rk)
		return
	}

	var stats Stats
	for i := range 3 {
		cp := &crashPoint{env: env, seed: pointSeed(seed, i+1), opts: cfg.Env.Options, probeName: "probe", stats: &stats, keepAll: i < 2}
		cp.single(w, marks, lastSync)
		if cp.next != nil {
			cp.next.Close()
		}
		if cp.err != nil {
			t.Fatalf("crash point %d: %v", i+1, cp.err)
		}
		for _, p := range cp.problems {
			if opErr != nil && modelProblem(p) {
				t.Logf("crash point %d (%s): %v (the failed op may have committed part of its changes)", i+1, cp.desc, p)
			} else {
				t.Errorf("crash point %d (%s): %v", i+1, cp.desc, p)
			}
		}
	}
	t.Logf("crash points checked %d files (%d exact), %d sectors", stats.Files, stats.Exact, stats.Sectors)
	if opErr == nil {
		if err := finalCheck(env); err != nil {
			t.Error(err)
		}
	}
}

// modelProblem reports whether p compares the volume with the workload's
// model, rather than checking the volume on its own (fsck, accounting,
// recovery).
func modelProblem(p Problem) bool {
	switch p.Kind {
	case "reopen", "check-before-recovery", "check", "orphans-left", "accounting", "probe":
		return false
	}
	return true
}

// leaderKillFsck crashes env with the metadata etcd holds now and checks
// the volume on its own: fsck before and after recovery.
func leaderKillFsck(t *testing.T, env *Env, rk *EtcdRecKV) {
	kv, err := rk.crashHead()
	if err != nil {
		t.Fatal(err)
	}
	next, pre, err := attach(env.Mem.CrashImage(1), nil, kv, env.Opts, true)
	if pre != nil {
		for _, p := range pre.Problems {
			t.Errorf("check before recovery: %v", p)
		}
	}
	if err != nil {
		t.Fatalf("opening the volume etcd holds: %v", err)
	}
	defer next.Close()
	if err := finalCheck(next); err != nil {
		t.Error(err)
	}
	t.Logf("the volume etcd holds (the failed commit applied) opens and checks clean")
}

// TestHarnessEtcdCatchesLostCommit checks the harness itself. etcd keeps
// every revision (until compacted), so a loss shows in what etcd holds
// now: a key a returned commit wrote, deleted behind the engine's back,
// must fail resolveFailed's check of the present state. A commit recorded
// with a revision not its own must fail the history check: one before it
// (the state differs; a crash keeping that commit must fail too), and one
// after it at which the volume's keys are the same (only the guard,
// LastOwnerKey, rewritten by every owned commit at its revision, shows
// it).
func TestHarnessEtcdCatchesLostCommit(t *testing.T) {
	m := etcdMeta(t, "selftest", campaignEtcdTimeout)
	env, err := NewEnv(EnvConfig{Etcd: m})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	f, err := env.FS.OpenFile("/f", sluice.O_RDWR|sluice.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rk := env.KV.(*EtcdRecKV)
	if err := rk.checkHistory(); err != nil {
		t.Fatalf("the history before any tampering: %v", err)
	}
	if _, err := rk.resolveFailed(); err != nil {
		t.Fatalf("the present state before any tampering: %v", err)
	}
	commits, _ := rk.Commits()
	if commits < 2 {
		t.Fatalf("%d commits: too few to test", commits)
	}

	// A commit recorded with the revision of the one before it.
	rk.mu.Lock()
	rev := rk.mu.revs[commits]
	rk.mu.revs[commits] = rk.mu.revs[commits-1]
	rk.mu.Unlock()
	if err := rk.checkHistory(); err == nil {
		t.Errorf("checkHistory passed with commit %d recorded at the revision before it", commits)
	} else {
		t.Logf("checkHistory: %v", err)
	}
	if _, err := env.Crash(1, nil, MetaCrash{UpTo: commits}); err == nil {
		t.Errorf("a crash keeping commit %d passed with the commit recorded at the revision before it", commits)
	} else {
		t.Logf("crash: %v", err)
	}
	// The same commit recorded at a revision after its own, before
	// anything else changed the prefix (a key outside it changed): only
	// the guard's mod revision tells the two apart.
	ctx, cancel := context.WithTimeout(context.Background(), campaignEtcdTimeout)
	defer cancel()
	put, err := m.Client.Put(ctx, "crashtest/selftest-elsewhere", "x")
	if err != nil {
		t.Fatal(err)
	}
	rk.mu.Lock()
	rk.mu.revs[commits] = put.Header.Revision
	rk.mu.Unlock()
	if err := rk.checkHistory(); err == nil {
		t.Errorf("checkHistory passed with commit %d recorded at revision %d, after its own %d", commits, put.Header.Revision, rev)
	} else {
		t.Logf("checkHistory: %v", err)
	}
	rk.mu.Lock()
	rk.mu.revs[commits] = rev
	rk.mu.Unlock()
	if err := rk.checkHistory(); err != nil {
		t.Fatalf("the history restored: %v", err)
	}

	// The last key the last commit wrote, lost.
	rk.mu.Lock()
	c := rk.mu.log[commits-1]
	lost := rk.prefix + string(c[len(c)-1].key)
	rk.mu.Unlock()
	if _, err := m.Client.Delete(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if _, err := rk.resolveFailed(); err == nil {
		t.Errorf("resolveFailed passed with key %q lost", lost)
	} else {
		t.Logf("resolveFailed: %v", err)
	}
}
