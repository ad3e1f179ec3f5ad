package fstest

// The battery and the model test on the etcd backend: the engine target
// with its metadata in a real three-member etcd cluster started in the test
// process (etcdtest), one cluster for the package, each engine under a key
// prefix of its own.

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/meta/etcdkv/etcdtest"
)

// etcdCluster runs with the limits sluice volumes need, as the README tells
// operators to start theirs. TestMain closes it.
var etcdCluster = etcdtest.Lazy{Options: etcdtest.Options{MaxTxnOps: etcdkv.VolumeMaxTxnOps, MaxRequestBytes: etcdkv.VolumeMaxRequestBytes}}

var etcdPrefixSeq atomic.Int64

// etcdOptions returns the options of an engine's KV on etcdCluster, under
// a prefix of its own.
func etcdOptions(t *testing.T) *etcdkv.Options {
	t.Helper()
	return &etcdkv.Options{
		Client:          etcdCluster.Client(t), // one connection for every engine
		Prefix:          fmt.Sprintf("fstest/%d/", etcdPrefixSeq.Add(1)),
		MaxTxnOps:       etcdkv.VolumeMaxTxnOps,
		MaxRequestBytes: etcdkv.VolumeMaxRequestBytes,
	}
}

// closeEtcd stops what the etcd targets started.
func closeEtcd() { etcdCluster.Close() }

// TestPOSIXEtcd runs TestPOSIX's battery, every case, on the engine with
// its metadata in etcd, against the same oracles.
func TestPOSIXEtcd(t *testing.T) {
	runPOSIX(t, posixCases(), func(t *testing.T) *Engine {
		return newTestEngine(t, EngineConfig{Etcd: etcdOptions(t)})
	})
}

// etcdSeeds are TestMetamorphicEtcd's sequences: one of each
// configuration (configFor) and of each kind (with and without reflink
// calls, with a mixed policy).
var etcdSeeds = []uint64{2, 4, 5, 7, 8, 9}

// TestMetamorphicEtcd runs a few of TestMetamorphic's sequences on
// engines with their metadata in etcd, under every policy that sequence
// runs under, compared with the model.
//
//	go test ./internal/harness/fstest -run TestMetamorphicEtcd -fstest.seed=N -v  # another
func TestMetamorphicEtcd(t *testing.T) {
	runSeeds(t, etcdSeeds, 100, func(seed uint64) int {
		if seed%4 == 2 {
			return 0
		}
		return reflinkPerMille
	}, etcdOptions)
}
