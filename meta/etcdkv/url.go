package etcdkv

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The limits a sluice volume needs from its etcd cluster: start every
// member with --max-txn-ops=VolumeMaxTxnOps and
// --max-request-bytes=VolumeMaxRequestBytes (or more). etcd's defaults (128
// operations, 1.5 MiB) refuse a truncate or unlink of a file of more than
// about 60 extents: each extent freed is one deletion and up to one change
// of a free-space record in the same transaction. 16384 operations cover a
// file of about 8000 extents; 4 MiB holds 16384 writes of the engine's
// records under a prefix of up to about 100 bytes, and stays under the
// 10 MiB above which etcd warns.
const (
	VolumeMaxTxnOps       = 16384
	VolumeMaxRequestBytes = 4 << 20
)

// DefaultPort is the client port a host of a metadata URL gets when it
// names none.
const DefaultPort = "2379"

// ParseURL parses a metadata URL, the form `sluice mkfs --meta` takes:
//
//	etcd://HOST[:PORT][,HOST[:PORT]...]/PREFIX    plain connections
//	etcds://HOST[:PORT][,HOST[:PORT]...]/PREFIX   TLS
//
// It returns the client endpoints (http:// or https:// URLs, port 2379
// where none is given) and the key prefix: PREFIX with a "/" appended when
// it does not end in one, so that volume "a" never sees volume "ab"'s keys.
// User names and passwords are not accepted in the URL (they would end up
// in files and process listings); nor are queries and fragments.
func ParseURL(s string) (endpoints []string, prefix string, err error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("metadata URL %q: %s (want etcd://HOST:PORT,HOST:PORT,.../PREFIX)", redactURL(s), fmt.Sprintf(format, a...))
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, "", bad("no scheme")
	}
	var httpScheme string
	switch scheme {
	case "etcd":
		httpScheme = "http"
	case "etcds":
		httpScheme = "https"
	default:
		return nil, "", bad("scheme %q is not etcd or etcds", scheme)
	}
	if strings.ContainsAny(rest, "?#") {
		return nil, "", bad("queries and fragments are not supported")
	}
	hosts, path, ok := strings.Cut(rest, "/")
	if !ok || strings.Trim(path, "/") == "" {
		return nil, "", bad("no key prefix: name the volume's key space after the hosts, e.g. /sluice/vol1")
	}
	if strings.Contains(hosts, "@") {
		return nil, "", bad("no user or password in the URL: use --etcd-user (or ETCDCTL_USER) and ETCDCTL_PASSWORD")
	}
	if hosts == "" {
		return nil, "", bad("no hosts")
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, "", bad("an empty host")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// No port (or an IPv6 address in brackets without one).
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), DefaultPort
			if strings.ContainsAny(host, "[]") {
				return nil, "", bad("host %q: %v", h, err)
			}
		}
		if host == "" {
			return nil, "", bad("host %q has no name", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return nil, "", bad("host %q: port %q is not a number from 1 to 65535", h, port)
		}
		endpoints = append(endpoints, httpScheme+"://"+net.JoinHostPort(host, port))
	}
	prefix = strings.TrimLeft(path, "/")
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return endpoints, prefix, nil
}

// redactURL hides what a URL has before an "@" in its host part (a user
// and password), so that no error prints a password.
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	} else {
		scheme += "://"
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndex(hosts, "@"); i >= 0 {
		hosts = "REDACTED" + hosts[i:]
	}
	if path != "" || strings.Contains(rest, "/") {
		path = "/" + path
	}
	return scheme + hosts + path
}

// TLSConfig builds a client TLS configuration from PEM files, as etcdctl's
// --cacert, --cert and --key do: caFile ("" for the system's roots) is
// trusted to sign the members' certificates, and certFile with keyFile
// (both or neither) is the client's certificate for clusters with
// --client-cert-auth.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("etcd TLS: a client certificate needs both --etcd-cert and --etcd-key")
	}
	info := transport.TLSInfo{TrustedCAFile: caFile, CertFile: certFile, KeyFile: keyFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	return cfg, nil
}

// Check asks the cluster, within RequestTimeout each, whether it is
// reachable and takes the transactions the KV may send: one with MaxTxnOps
// comparisons and one of MaxRequestBytes (read-only transactions, so that
// nothing is written and no raft entry is made). A cluster whose limits are
// lower fails with an error wrapping ErrTxnTooLarge that names the etcd
// flag to raise. Open does not check: mkfs and the volume's open do.
func (kv *KV) Check() error {
	ctx, cancel := kv.ctx()
	defer cancel()
	if _, err := kv.client.Get(clientv3.WithRequireLeader(ctx), kv.opts.Prefix, clientv3.WithCountOnly()); err != nil {
		return opError("check", nil, fmt.Errorf("etcd cluster %v not reachable within %v: %w", kv.opts.Endpoints, kv.opts.RequestTimeout, err))
	}
	probe := kv.key([]byte("\x00probe"))
	cmps := make([]clientv3.Cmp, kv.opts.MaxTxnOps)
	for i := range cmps {
		cmps[i] = clientv3.Compare(clientv3.ModRevision(probe), "<", int64(math.MaxInt64))
	}
	if err := kv.probe(cmps); err != nil {
		return opError("check", nil, limitError(err, "--max-txn-ops", kv.opts.MaxTxnOps,
			fmt.Sprintf("a transaction of %d comparisons", kv.opts.MaxTxnOps)))
	}
	// One comparison with a value that fills the request.
	big := strings.Repeat("x", kv.opts.MaxRequestBytes-requestReserveBytes-len(probe)-64)
	if err := kv.probe([]clientv3.Cmp{clientv3.Compare(clientv3.Value(probe), "=", big)}); err != nil {
		return opError("check", nil, limitError(err, "--max-request-bytes", kv.opts.MaxRequestBytes,
			fmt.Sprintf("a request of about %d bytes", kv.opts.MaxRequestBytes-requestReserveBytes)))
	}
	return nil
}

func (kv *KV) probe(cmps []clientv3.Cmp) error {
	ctx, cancel := kv.ctx()
	defer cancel()
	_, err := kv.client.Txn(ctx).If(cmps...).Commit()
	return err
}

// limitError explains a probe the cluster refused.
func limitError(err error, flag string, want int, what string) error {
	if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) || status.Code(err) == codes.ResourceExhausted {
		return fmt.Errorf("%w: the etcd cluster refused %s: start its members with %s=%d or more (sluice's metadata transactions need it): %w",
			ErrTxnTooLarge, what, flag, want, err)
	}
	return fmt.Errorf("checking the etcd cluster's %s: %w", flag, err)
}

// Count returns how many keys the volume's prefix holds (mkfs refuses a
// prefix that is not empty).
func (kv *KV) Count() (int64, error) {
	ctx, cancel := kv.ctx()
	defer cancel()
	resp, err := kv.client.Get(ctx, kv.opts.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, opError("count", nil, err)
	}
	return resp.Count, nil
}

// Clear deletes every key under the volume's prefix, in one etcd request
// (mkfs --force over an old volume).
func (kv *KV) Clear() error {
	ctx, cancel := kv.ctx()
	defer cancel()
	if _, err := kv.client.Delete(ctx, kv.opts.Prefix, clientv3.WithPrefix()); err != nil {
		return opError("clear", nil, fmt.Errorf("outcome unknown: %w", err))
	}
	return nil
}
