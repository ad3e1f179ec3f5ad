package etcdkv

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Options configures Open.
type Options struct {
	// Endpoints are the client URLs of the cluster's members, e.g.
	// "http://10.0.0.1:2379". Listing every member lets the client move to
	// another when one fails. Required unless Client is set.
	Endpoints []string
	// Client is a connected etcd client to use instead of dialling
	// Endpoints; Close leaves it open. Its MaxCallSendMsgSize must exceed
	// MaxRequestBytes. The default value is nil.
	Client *clientv3.Client
	// TLS, when set, makes the client connect over TLS with this
	// configuration (trusted CAs, client certificate); the endpoints are
	// then https:// URLs. TLSConfig builds one from files, as etcdctl's
	// --cacert, --cert and --key do. The default value is nil: plain
	// connections.
	TLS *tls.Config
	// Username and Password authenticate the client to a cluster with
	// authentication enabled (etcdctl's --user). Password is never
	// printed (String says only whether it is set). The default value
	// is "": no authentication.
	Username, Password string
	// Prefix is prepended to every key: the volume's own key space, e.g.
	// "sluice/<volume uuid>/". Required. No volume's prefix may be a prefix
	// of another's, or their scans would see each other's keys.
	Prefix string
	// RequestTimeout bounds every etcd call (one page of a scan, one
	// commit). The default value is 5s.
	RequestTimeout time.Duration
	// DialTimeout bounds the client's connection attempts. The default
	// value is 5s.
	DialTimeout time.Duration
	// MaxTxnOps is the cluster's --max-txn-ops: the most comparisons, and
	// separately the most writes, one commit may carry. It must not exceed
	// the server's setting. The default value is 128, etcd's default.
	MaxTxnOps int
	// MaxRequestBytes is the cluster's --max-request-bytes: the largest
	// request one commit may send. It must not exceed the server's setting.
	// The default value is 1.5 MiB, etcd's default.
	MaxRequestBytes int
	// ScanPageSize is how many keys one range request of a Scan returns.
	// The default value is 1000.
	ScanPageSize int
	// ReadCacheEntries bounds the read cache, which serves Get while the
	// KV owns the volume (see "Read cache" in the package doc): at most
	// this many keys, the first dropped to make room. A negative
	// value turns the cache off. The default value is 131072.
	ReadCacheEntries int
	// Logger receives the etcd client's log. The default value is a logger
	// that drops everything (failures reach the caller as errors).
	Logger *zap.Logger
}

// Defaults of Options.
const (
	DefaultRequestTimeout   = 5 * time.Second
	DefaultDialTimeout      = 5 * time.Second
	DefaultMaxTxnOps        = 128
	DefaultMaxRequestBytes  = 3 << 19 // 1.5 MiB
	DefaultScanPageSize     = 1000
	DefaultReadCacheEntries = 1 << 17
)

// EnsureDefaults fills in the default value of every unset field and
// returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxTxnOps == 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.ScanPageSize == 0 {
		o.ScanPageSize = DefaultScanPageSize
	}
	if o.ReadCacheEntries == 0 {
		o.ReadCacheEntries = DefaultReadCacheEntries
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// Validate reports every problem with o at once.
func (o *Options) Validate() error {
	var errs []error
	if len(o.Endpoints) == 0 && o.Client == nil {
		errs = append(errs, errors.New("no Endpoints and no Client"))
	}
	if o.Prefix == "" {
		errs = append(errs, errors.New("empty Prefix: a volume needs its own key space"))
	}
	if o.Prefix != "" && strings.Count(o.Prefix, "\xff") == len(o.Prefix) {
		errs = append(errs, fmt.Errorf("a Prefix of 0xff bytes only (%q) has no range end", o.Prefix))
	}
	if o.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout %v is negative", o.RequestTimeout))
	}
	if o.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("DialTimeout %v is negative", o.DialTimeout))
	}
	if o.MaxTxnOps < 0 {
		errs = append(errs, fmt.Errorf("MaxTxnOps %d is negative", o.MaxTxnOps))
	}
	if o.MaxRequestBytes < 0 || (o.MaxRequestBytes > 0 && o.MaxRequestBytes <= requestReserveBytes) {
		errs = append(errs, fmt.Errorf("MaxRequestBytes %d leaves no room for a request (at least %d bytes are needed)", o.MaxRequestBytes, requestReserveBytes+1))
	}
	if o.Password != "" && o.Username == "" {
		errs = append(errs, errors.New("a Password without a Username"))
	}
	if o.ScanPageSize < 0 {
		errs = append(errs, fmt.Errorf("ScanPageSize %d is negative", o.ScanPageSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("etcdkv: invalid options: %w", err)
	}
	return nil
}

// String describes o in one line, so that a test or benchmark run can
// record exactly what it ran.
func (o *Options) String() string {
	client := "dial"
	if o.Client != nil {
		client = "given"
	}
	password := "none"
	if o.Password != "" {
		password = "(set)"
	}
	return fmt.Sprintf("etcdkv.Options{Endpoints: %q, Client: %s, TLS: %v, Username: %q, Password: %s, Prefix: %q, RequestTimeout: %v, DialTimeout: %v, MaxTxnOps: %d, MaxRequestBytes: %d, ScanPageSize: %d, ReadCacheEntries: %d}",
		o.Endpoints, client, o.TLS != nil, o.Username, password, o.Prefix, o.RequestTimeout, o.DialTimeout, o.MaxTxnOps, o.MaxRequestBytes, o.ScanPageSize, o.ReadCacheEntries)
}
