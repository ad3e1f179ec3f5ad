// Package etcdtest runs an etcd cluster inside a test process: every member
// an embedded etcd server (go.etcd.io/etcd/server/v3/embed) on 127.0.0.1
// ports, with its data in a directory of the caller's. It is for tests
// only: importing it links the etcd server, which no sluice binary does.
//
// Members can be stopped (gracefully: a leader hands over first) or killed
// (a leader just disappears) and restarted with their data, to test what a
// client sees when the cluster loses a member, its leader or its quorum.
// Every wait is bounded: Start, Restart and WaitLeader give up after
// Options.StartTimeout, a member's shutdown is bounded by etcd's own
// request timeout, and Close stops everything Start started.
//
// A Cluster's methods are not safe for concurrent use; a test drives it
// from one goroutine.
package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options configures Start.
type Options struct {
	// Members is the number of members. The default value is 3.
	Members int
	// TickMs is the raft heartbeat interval in milliseconds (etcd's
	// --heartbeat-interval). The default value is 50: short, so that
	// elections after a stop take well under a second, and not shorter, so
	// that a loaded test machine does not start spurious elections.
	TickMs uint
	// ElectionMs is the election timeout in milliseconds (etcd's
	// --election-timeout). The default value is 500.
	ElectionMs uint
	// MaxTxnOps is etcd's --max-txn-ops. The default value is 128, etcd's.
	MaxTxnOps uint
	// MaxRequestBytes is etcd's --max-request-bytes. The default value is
	// 1.5 MiB, etcd's.
	MaxRequestBytes uint
	// StartTimeout bounds the wait for members to become ready in Start and
	// Restart. The default value is 30s.
	StartTimeout time.Duration
}

func (o *Options) ensureDefaults() {
	if o.Members == 0 {
		o.Members = 3
	}
	if o.TickMs == 0 {
		o.TickMs = 50
	}
	if o.ElectionMs == 0 {
		o.ElectionMs = 500
	}
	if o.MaxTxnOps == 0 {
		o.MaxTxnOps = embed.DefaultMaxTxnOps
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = embed.DefaultMaxRequestBytes
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
}

// Cluster is a running (or partly stopped) embedded etcd cluster.
type Cluster struct {
	opts    Options
	dir     string
	cluster string // etcd's --initial-cluster
	members []*member
}

type member struct {
	name      string
	dir       string
	clientURL url.URL
	peerURL   url.URL
	etcd      *embed.Etcd // nil while stopped
}

// startAttempts bounds how often Start picks new ports when a member cannot
// bind the ones it was given (another process took them in between).
const startAttempts = 3

// Start starts a new cluster whose members keep their data under dir (one
// subdirectory each), and waits until every member is ready.
func Start(dir string, o Options) (*Cluster, error) {
	o.ensureDefaults()
	var errs []error
	for attempt := range startAttempts {
		c, err := start(filepath.Join(dir, fmt.Sprintf("try%d", attempt)), o)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("etcdtest: starting a %d-member cluster: %w", o.Members, errors.Join(errs...))
}

func start(dir string, o Options) (*Cluster, error) {
	ports, err := freePorts(2 * o.Members)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: o, dir: dir}
	var initial []string
	for i := range o.Members {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
			clientURL: url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			peerURL:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL.String())
	}
	c.cluster = strings.Join(initial, ",")
	all := make([]int, o.Members)
	for i := range all {
		all[i] = i
	}
	if err := c.Restart(all...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. embed cannot
// listen on port 0 for peers (every member must know the others' URLs
// before starting), so the ports are found first, then released for etcd.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// config returns member m's configuration. With data in m.dir, etcd
// restarts the member from it and ignores the initial-cluster settings.
func (c *Cluster) config(m *member) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.InitialCluster = c.cluster
	cfg.InitialClusterToken = "etcdtest"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.TickMs = c.opts.TickMs
	cfg.ElectionMs = c.opts.ElectionMs
	cfg.MaxTxnOps = c.opts.MaxTxnOps
	cfg.MaxRequestBytes = c.opts.MaxRequestBytes
	// Tests stop members with Close, never by crashing the machine: the
	// page cache keeps what an fsync would have, and the tests run faster
	// on a shared disk.
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	return cfg
}

// Endpoints returns every member's client URL, stopped members included.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL.String())
	}
	return eps
}

// URL returns the etcd:// URL of a volume's metadata under prefix on the
// cluster (what `sluice mkfs --meta` takes).
func (c *Cluster) URL(prefix string) string {
	var hosts []string
	for _, ep := range c.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	return "etcd://" + strings.Join(hosts, ",") + "/" + prefix
}

// Members returns the number of members.
func (c *Cluster) Members() int { return len(c.members) }

// Leader returns the index of the member that is the raft leader, or -1
// when no running member is (an election is under way, or quorum is lost).
func (c *Cluster) Leader() int {
	for i, m := range c.members {
		if m.etcd != nil && m.etcd.Server.Leader() == m.etcd.Server.MemberID() {
			return i
		}
	}
	return -1
}

// WaitLeader waits, at most StartTimeout, until a member is the leader, and
// returns its index.
func (c *Cluster) WaitLeader() (int, error) {
	deadline := time.Now().Add(c.opts.StartTimeout)
	for time.Now().Before(deadline) {
		if i := c.Leader(); i >= 0 {
			return i, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1, fmt.Errorf("etcdtest: no leader after %v", c.opts.StartTimeout)
}

// Stop stops members (gracefully: their data stays for Restart).
// Stopping a stopped member does nothing.
func (c *Cluster) Stop(members ...int) {
	for _, i := range members {
		m := c.members[i]
		if m.etcd != nil {
			m.etcd.Close()
			m.etcd = nil
		}
	}
}

// Kill stops member i abruptly, as a crash would as far as the other
// members see it: its raft node stops first, so a leader hands over
// nothing and the others must elect a new leader after ElectionMs. (Its
// data stays complete, for Restart.)
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	if m.etcd != nil {
		m.etcd.Server.HardStop()
		m.etcd.Close()
		m.etcd = nil
	}
}

// Restart starts stopped members from their data and waits until each is
// ready (which needs a quorum of members running). Restarting a running
// member does nothing.
func (c *Cluster) Restart(members ...int) error {
	var started []*member
	for _, i := range members {
		m := c.members[i]
		if m.etcd != nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(m.dir), 0o755); err != nil {
			return err
		}
		e, err := embed.StartEtcd(c.config(m))
		if err != nil {
			return fmt.Errorf("etcdtest: starting member %s: %w", m.name, err)
		}
		m.etcd = e
		started = append(started, m)
	}
	timeout := time.After(c.opts.StartTimeout)
	for _, m := range started {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			return fmt.Errorf("etcdtest: member %s failed: %w", m.name, err)
		case <-timeout:
			return fmt.Errorf("etcdtest: member %s not ready after %v", m.name, c.opts.StartTimeout)
		}
	}
	return nil
}

// Running returns the indexes of the running members.
func (c *Cluster) Running() []int {
	var r []int
	for i, m := range c.members {
		if m.etcd != nil {
			r = append(r, i)
		}
	}
	return r
}

// Close stops every member. The data directory is the caller's to remove.
func (c *Cluster) Close() {
	for i := range c.members {
		c.Stop(i)
	}
}

// Lazy starts one cluster for a test binary the first time a test asks for
// it, so that the binary's other tests do not pay for it. Declare one per
// package and call Close from TestMain after m.Run. It is safe for
// concurrent use.
type Lazy struct {
	// Options configures the cluster Get starts.
	Options Options

	once    sync.Once
	dir     string
	cluster *Cluster
	err     error

	clientOnce sync.Once
	client     *clientv3.Client
	clientErr  error
}

// Get returns the cluster, starting it on the first call; a start that
// failed fails every caller's test.
func (l *Lazy) Get(tb testing.TB) *Cluster {
	tb.Helper()
	l.once.Do(func() {
		l.dir, l.err = os.MkdirTemp("", "etcdtest-")
		if l.err == nil {
			l.cluster, l.err = Start(l.dir, l.Options)
		}
	})
	if l.err != nil {
		tb.Fatalf("starting the etcd cluster: %v", l.err)
	}
	return l.cluster
}

// Client returns one client of the cluster for the whole test binary,
// started (with the cluster) on the first call, so that many volumes share
// one connection: each gives its KV the client and a prefix of its own.
// Its messages may be as large as Options.MaxRequestBytes. Close closes
// it.
func (l *Lazy) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	c := l.Get(tb)
	l.clientOnce.Do(func() {
		o := l.Options
		o.ensureDefaults()
		l.client, l.clientErr = clientv3.New(clientv3.Config{
			Endpoints:          c.Endpoints(),
			DialTimeout:        5 * time.Second,
			MaxCallSendMsgSize: int(o.MaxRequestBytes) + 1<<20, // room for gRPC's framing
			Logger:             zap.NewNop(),
		})
	})
	if l.clientErr != nil {
		tb.Fatalf("etcd client: %v", l.clientErr)
	}
	return l.client
}

// Close closes the client and stops the cluster if they were started, and
// removes the cluster's data.
func (l *Lazy) Close() {
	if l.client != nil {
		l.client.Close()
	}
	if l.cluster != nil {
		l.cluster.Close()
	}
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
}
