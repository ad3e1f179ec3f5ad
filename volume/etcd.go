package volume

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/meta/etcdkv"
)

// EtcdOptions says where a volume's metadata lives in etcd and how to reach
// it. Mkfs writes every field but Password and the timeouts to the volume
// directory's pointer file (VOLUME/etcd.json); Open reads it back, and a
// field set in OpenOptions.Etcd overrides the file's.
type EtcdOptions struct {
	// URL is the metadata URL: etcd://HOST:PORT,HOST:PORT,.../PREFIX
	// (etcds:// for TLS), as etcdkv.ParseURL reads it. Required at mkfs;
	// at open, if set, it must be the volume's.
	URL string
	// CACert, Cert and Key are PEM files, as etcdctl's --cacert, --cert
	// and --key: the CA that signs the members' certificates ("" for the
	// system's roots) and the client's certificate and key (both or
	// neither). Any of them makes the connection TLS. The default value
	// is "".
	CACert, Cert, Key string
	// User is the etcd user name (clusters with authentication enabled).
	// The default value is "": no authentication.
	User string
	// Password is User's password. It is never written to a file or
	// printed. The default value is "".
	Password string
	// MaxTxnOps and MaxRequestBytes are the cluster's --max-txn-ops and
	// --max-request-bytes. Mkfs and Open check that the cluster accepts
	// them. The default values are etcdkv.VolumeMaxTxnOps and
	// etcdkv.VolumeMaxRequestBytes, the settings sluice needs.
	MaxTxnOps, MaxRequestBytes int
	// DialTimeout and RequestTimeout bound connecting and every etcd
	// call. The default values are etcdkv's (5s each).
	DialTimeout, RequestTimeout time.Duration
}

// etcdPointer is the JSON of VOLUME/etcd.json.
type etcdPointer struct {
	URL             string `json:"url"`
	CACert          string `json:"cacert,omitempty"`
	Cert            string `json:"cert,omitempty"`
	Key             string `json:"key,omitempty"`
	User            string `json:"user,omitempty"`
	MaxTxnOps       int    `json:"max_txn_ops,omitempty"`
	MaxRequestBytes int    `json:"max_request_bytes,omitempty"`
}

func etcdPath(dir string) string { return filepath.Join(dir, "etcd.json") }

// merge returns p with the fields set in o overriding its own.
func (p etcdPointer) merge(o *EtcdOptions) (EtcdOptions, error) {
	out := EtcdOptions{URL: p.URL, CACert: p.CACert, Cert: p.Cert, Key: p.Key, User: p.User,
		MaxTxnOps: p.MaxTxnOps, MaxRequestBytes: p.MaxRequestBytes}
	if o == nil {
		return out, nil
	}
	if o.URL != "" && o.URL != p.URL {
		return out, fmt.Errorf("the volume's metadata is at %s, not %s", p.URL, o.URL)
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&out.CACert, o.CACert)
	set(&out.Cert, o.Cert)
	set(&out.Key, o.Key)
	set(&out.User, o.User)
	out.Password = o.Password
	if o.MaxTxnOps != 0 {
		out.MaxTxnOps = o.MaxTxnOps
	}
	if o.MaxRequestBytes != 0 {
		out.MaxRequestBytes = o.MaxRequestBytes
	}
	out.DialTimeout, out.RequestTimeout = o.DialTimeout, o.RequestTimeout
	return out, nil
}

// pointer returns what the pointer file keeps of o.
func (o *EtcdOptions) pointer() etcdPointer {
	return etcdPointer{URL: o.URL, CACert: o.CACert, Cert: o.Cert, Key: o.Key, User: o.User,
		MaxTxnOps: o.MaxTxnOps, MaxRequestBytes: o.MaxRequestBytes}
}

// kvOptions turns o into etcdkv's options.
func (o *EtcdOptions) kvOptions() (etcdkv.Options, error) {
	eps, prefix, err := etcdkv.ParseURL(o.URL)
	if err != nil {
		return etcdkv.Options{}, err
	}
	ko := etcdkv.Options{
		Endpoints:       eps,
		Prefix:          prefix,
		Username:        o.User,
		Password:        o.Password,
		MaxTxnOps:       o.MaxTxnOps,
		MaxRequestBytes: o.MaxRequestBytes,
		DialTimeout:     o.DialTimeout,
		RequestTimeout:  o.RequestTimeout,
	}
	if ko.MaxTxnOps == 0 {
		ko.MaxTxnOps = etcdkv.VolumeMaxTxnOps
	}
	if ko.MaxRequestBytes == 0 {
		ko.MaxRequestBytes = etcdkv.VolumeMaxRequestBytes
	}
	if o.Password != "" && o.User == "" {
		return ko, errors.New("an etcd password needs a user (--etcd-user or ETCDCTL_USER)")
	}
	tlsOn := strings.HasPrefix(o.URL, "etcds://")
	if o.CACert != "" || o.Cert != "" || o.Key != "" {
		if !tlsOn {
			return ko, fmt.Errorf("TLS files are given but the metadata URL %s is not etcds://", o.URL)
		}
	}
	if tlsOn {
		if ko.TLS, err = etcdkv.TLSConfig(o.CACert, o.Cert, o.Key); err != nil {
			return ko, err
		}
	}
	return ko, nil
}

// openEtcd connects to the cluster o names and checks that it is reachable
// and accepts sluice's transactions (etcdkv.KV.Check).
func openEtcd(o *EtcdOptions) (*etcdkv.KV, error) {
	ko, err := o.kvOptions()
	if err != nil {
		return nil, err
	}
	kv, err := etcdkv.Open(ko)
	if err != nil {
		return nil, err
	}
	if err := kv.Check(); err != nil {
		kv.Close()
		return nil, err
	}
	return kv, nil
}

// readPointer reads VOLUME/etcd.json; ok is false when there is none.
func readPointer(dir string) (p etcdPointer, ok bool, err error) {
	b, err := os.ReadFile(etcdPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	if err := json.Unmarshal(b, &p); err != nil || p.URL == "" {
		if err == nil {
			err = errors.New("no url")
		}
		return p, true, fmt.Errorf("%s is damaged (%v): it should name the volume's metadata, e.g. {\"url\": \"etcd://host:2379/prefix\"}", etcdPath(dir), err)
	}
	return p, true, nil
}

// writePointer writes VOLUME/etcd.json durably (a temporary file renamed
// over it, the directory synced).
func writePointer(dir string, p etcdPointer) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	tmp := etcdPath(dir) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, etcdPath(dir))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", etcdPath(dir), err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// prepareEtcd makes sure the volume's prefix is empty: mkfs refuses one
// that holds keys unless force, which deletes them.
func prepareEtcd(kv *etcdkv.KV, o *EtcdOptions, force bool) error {
	n, err := kv.Count()
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if h, err := kv.OwnerOf(); err != nil {
		return err
	} else if h != nil {
		return holderInUse(o.URL, h)
	}
	if !force {
		if v, err := kv.Get(meta.SuperKey()); err == nil {
			if sb, err := meta.DecodeSuperblock(v); err == nil {
				return fmt.Errorf("%s already holds sluice volume %s; pass --force to overwrite it", o.URL, UUIDString(sb.UUID))
			}
		}
		return fmt.Errorf("%s already holds %d keys that are not a sluice volume; choose another prefix, or pass --force to delete them", o.URL, n)
	}
	return kv.Clear()
}

// makeSharedData links VOLUME/data to the shared data device or image
// o.Data, creating the image (sparse, or preallocated) when it does not
// exist.
func makeSharedData(dir string, o MkfsOptions) error {
	p := dataPath(dir)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	abs, err := filepath.Abs(o.Data)
	if err != nil {
		return err
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if o.Size == 0 {
			return fmt.Errorf("--data %s does not exist: pass --size to create it as an image file", o.Data)
		}
		f, err := os.OpenFile(abs, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			return fmt.Errorf("creating the data image: %w", err)
		}
		if o.Prealloc {
			err = unix.Fallocate(int(f.Fd()), 0, 0, o.Size)
		} else {
			err = f.Truncate(o.Size)
		}
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		if err != nil {
			os.Remove(abs)
			return fmt.Errorf("creating the data image %s: %w", o.Data, err)
		}
	case err != nil:
		return fmt.Errorf("data device: %w", err)
	case fi.Mode().IsRegular():
		if o.Size > fi.Size() {
			return fmt.Errorf("--data %s is %d bytes, smaller than --size %d", o.Data, fi.Size(), o.Size)
		}
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
	default:
		return fmt.Errorf("--data %s is neither a block device nor an image file", o.Data)
	}
	return os.Symlink(abs, p)
}
