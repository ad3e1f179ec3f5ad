package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicefs/sluice/volume"
)

// etcdFlags are the flags of a volume whose metadata is in etcd: --meta at
// mkfs, the connection's TLS files, user and timeout at every command that
// opens a volume. Each has an etcdctl environment variable as its default
// (ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER; the password
// only from ETCDCTL_PASSWORD or --etcd-password-file, never from a flag
// value that ps would show).
type etcdFlags struct {
	meta, cacert, cert, key, user, passwordFile string
	maxTxnOps, maxRequestBytes                  int
	timeout                                     time.Duration
}

// addEtcdFlags adds the etcd flags to fl; mkfs also gets --meta and the
// cluster's limits, which it records in the volume's pointer file.
func addEtcdFlags(fl *pflag.FlagSet, f *etcdFlags, mkfs bool) {
	if mkfs {
		fl.StringVar(&f.meta, "meta", "", "keep the metadata in etcd at `URL` etcd://HOST:PORT,HOST:PORT,.../PREFIX (etcds:// for TLS) instead of VOLUME/meta/; needs --data")
		fl.IntVar(&f.maxTxnOps, "etcd-max-txn-ops", 0, "the cluster's --max-txn-ops `N` (default 16384, what sluice needs; checked against the cluster)")
		fl.IntVar(&f.maxRequestBytes, "etcd-max-request-bytes", 0, "the cluster's --max-request-bytes `N` (default 4194304, what sluice needs; checked against the cluster)")
	}
	fl.StringVar(&f.cacert, "etcd-cacert", "", "etcd TLS: trust the CA certificate `FILE` (default $ETCDCTL_CACERT)")
	fl.StringVar(&f.cert, "etcd-cert", "", "etcd TLS: client certificate `FILE` (default $ETCDCTL_CERT)")
	fl.StringVar(&f.key, "etcd-key", "", "etcd TLS: client key `FILE` (default $ETCDCTL_KEY)")
	fl.StringVar(&f.user, "etcd-user", "", "etcd user `NAME` (default $ETCDCTL_USER; a NAME:PASSWORD there is split); the password comes from $ETCDCTL_PASSWORD or --etcd-password-file")
	fl.StringVar(&f.passwordFile, "etcd-password-file", "", "read the etcd user's password from `FILE` (its first line)")
	fl.DurationVar(&f.timeout, "etcd-timeout", 0, "bound on connecting to etcd and on each etcd request (`DURATION`, default 5s)")
}

// options returns the etcd options the flags and the environment give, or
// nil when none is set (a volume on Pebble, or one whose pointer file says
// everything).
func (f *etcdFlags) options() (*volume.EtcdOptions, error) {
	env := func(flag, name string) string {
		if flag != "" {
			return flag
		}
		return os.Getenv(name)
	}
	o := &volume.EtcdOptions{
		URL:             f.meta,
		CACert:          env(f.cacert, "ETCDCTL_CACERT"),
		Cert:            env(f.cert, "ETCDCTL_CERT"),
		Key:             env(f.key, "ETCDCTL_KEY"),
		User:            env(f.user, "ETCDCTL_USER"),
		Password:        os.Getenv("ETCDCTL_PASSWORD"),
		MaxTxnOps:       f.maxTxnOps,
		MaxRequestBytes: f.maxRequestBytes,
		DialTimeout:     f.timeout,
		RequestTimeout:  f.timeout,
	}
	if f.maxTxnOps < 0 || f.maxRequestBytes < 0 {
		return nil, &usageError{"--etcd-max-txn-ops and --etcd-max-request-bytes must be positive"}
	}
	if f.timeout < 0 {
		return nil, &usageError{"--etcd-timeout must be positive"}
	}
	if name, pw, ok := strings.Cut(o.User, ":"); ok {
		o.User = name
		if o.Password == "" {
			o.Password = pw
		}
	}
	if f.passwordFile != "" {
		b, err := os.ReadFile(f.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-password-file: %w", unwrapPathError(err))
		}
		o.Password, _, _ = strings.Cut(string(b), "\n")
	}
	if *o == (volume.EtcdOptions{}) {
		return nil, nil
	}
	return o, nil
}
