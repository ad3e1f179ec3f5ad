package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/fusefs"
	"github.com/sluicefs/sluice/fuseserver"
	"github.com/sluicefs/sluice/internal/sys/fuseuring"
	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/volume"
)

func newMountCommand() *cobra.Command {
	var f mountFlags
	cmd := &cobra.Command{
		Use:   "mount VOLUME DIR [--policy concurrent|seeds|classic] [--cache-size SIZE] [--metrics ADDR] [-o OPTS] [--debug] [--standby] [--lease-ttl DURATION]",
		Short: "serve a volume through FUSE in the foreground (creates it on first use)",
		Long: `Serve the volume VOLUME on the directory DIR through FUSE, in the foreground, until
it is unmounted (sluice umount DIR) or interrupted. A VOLUME that does not exist
(or is an empty directory) is created first, as a sparse image of --size bytes.
It needs /dev/fuse and either root or fusermount3.

Who may use the mount: A mount made by root is open to every user, with the
kernel enforcing file modes (default_permissions), as on XFS. An unprivileged mount
(through fusermount3) keeps FUSE's default: only the mounting user may enter,
unless /etc/fuse.conf has user_allow_other and ` + "`-o allow_other`" + ` is given. ` + "`-o`" + ` passes
allow_other, ro, suid, nosuid, dev, nodev, exec, noexec, noatime through.

At the first SIGINT (Ctrl-C) or SIGTERM it makes everything durable, unmounts
(waiting up to --grace for files open on the mount to be closed, then aborting the
FUSE connection), closes the volume and exits 0. A second signal aborts at once
(exit 1); a third exits immediately.

A volume whose metadata is in etcd is served by one host at a time: the mount owns
it through an etcd lease of --lease-ttl, kept alive while it serves. A mount of a
volume another host owns fails with a message naming that host, or, with
--standby, waits until that host unmounts or its lease expires (it crashed, or
lost etcd), then takes the volume over and serves it. After a crash, the new
owner's data I/O waits --lease-ttl + --lease-ttl/5 + --lease-io-bound, so that
nothing the old host submitted can land after it; metadata operations proceed at
once. A mount that loses its lease (etcd deleted it: the host was frozen or cut
off from etcd for longer than the TTL) stops: its users get ENOTCONN, and it
exits 1.

While it serves, the mount takes requests on the unix socket VOLUME/control (mode
0600: the mounting user's), through which sluice scrub VOLUME scrubs the mounted
volume; it is removed at unmount (and replaced, if a killed mount left it).`,
		Example: `  sluice mount /var/lib/vol /mnt/vol
  sluice mount /var/lib/vol /mnt/vol -o allow_other,noatime --policy classic --cache-size 1G
  sluice mount /var/lib/vol /mnt/vol --metrics localhost:9100 --debug
  sluice mount /var/lib/etcd-vol /mnt/vol --standby --lease-ttl 5s`,
		Args: wantArgs(2, "VOLUME and DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMount(args[0], args[1], &f, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.policy, "policy", "concurrent", "the I/O `POLICY`: concurrent, seeds (the five seed optimisations only), classic, or a comma-separated list of Policy fields to switch on")
	fl.StringVar(&f.cacheSize, "cache-size", "256M", "`SIZE` of sluice's page cache")
	fl.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics (and /debug/pprof) on `ADDR`, e.g. localhost:9100")
	fl.VarP(&f.opts, "options", "o", "mount `OPTS`, comma-separated, repeatable: allow_other, ro, suid, nosuid, dev, nodev, exec, noexec, noatime")
	fl.BoolVar(&f.debug, "debug", false, "log every FUSE request and reply")
	fl.StringVar(&f.size, "size", fmt.Sprintf("%dG", DefaultVolumeSize>>30), "`SIZE` of the sparse image when VOLUME is created")
	fl.StringVar(&f.cache, "cache", "kernel", "who caches buffered data, the cache `MODE`: kernel (the page cache) or sluice (FOPEN_DIRECT_IO everywhere)")
	fl.BoolVar(&f.writeback, "writeback-cache", true, "with --cache kernel: let the kernel cache writes (CAP_WRITEBACK_CACHE); --writeback-cache=false writes every write(2) through")
	fl.BoolVar(&f.strictDIO, "strict-dio", false, "refuse O_DIRECT I/O not aligned to the I/O unit with EINVAL")
	fl.IntVar(&f.maxBackground, "max-background", fusefs.DefaultMaxBackground, "kernel limit (`N`) on background FUSE requests (readahead, async direct I/O)")
	fl.StringVar(&f.transport, "transport", "auto", "how FUSE requests travel, the `TRANSPORT`: auto (io_uring when the kernel offers it, /dev/fuse otherwise), devfuse or uring")
	fl.StringVar(&f.uringIssuer, "uring-issuer", "owner", "with io_uring, the thread that issues ring commands, the `ISSUER`: owner (one thread per queue, which also serves quick requests), sqpoll (the kernel's polling thread) or thread (one submitting thread per queue)")
	fl.BoolVar(&f.uringLend, "uring-lend", true, "with io_uring and the owner issuer: carry the device reads and writes of the READs and WRITEs an owner thread starts on its queue's ring, one io_uring_enter for both; --uring-lend=false gives the device its own rings")
	fl.DurationVar(&f.syncInterval, "sync-interval", 5*time.Second, "how often (`DURATION`) the background syncer makes completed writes durable without an fsync")
	fl.DurationVar(&f.grace, "grace", DefaultGrace, "at SIGINT/SIGTERM, how long to wait (`DURATION`) for open files before aborting the mount")
	addEtcdFlags(fl, &f.etcd, false)
	fl.DurationVar(&f.leaseTTL, "lease-ttl", etcdkv.DefaultLeaseTTL, "volumes in etcd: the TTL of this host's lease on the volume (`DURATION`, whole seconds): how soon after a crash another host may take the volume over")
	fl.DurationVar(&f.ioBound, "lease-io-bound", volume.DefaultIOBound, "volumes in etcd: the longest a data request may stay in the device (`DURATION`); a takeover after a crash waits TTL + TTL/5 + this before its first data I/O")
	fl.BoolVar(&f.standby, "standby", false, "volumes in etcd: if another host owns the volume, wait until it unmounts or its lease expires, then take it over and serve")
	cmd.RegisterFlagCompletionFunc("policy", completeWords("concurrent", "seeds", "classic"))
	cmd.RegisterFlagCompletionFunc("cache", completeWords("kernel", "sluice"))
	cmd.RegisterFlagCompletionFunc("transport", completeWords("auto", "devfuse", "uring"))
	cmd.RegisterFlagCompletionFunc("uring-issuer", completeWords("owner", "sqpoll", "thread"))
	cmd.RegisterFlagCompletionFunc("options", completeWords("allow_other", "ro", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "noatime"))
	return cmd
}

// mountFlags are the flags of mount.
type mountFlags struct {
	policy, cacheSize, metrics, size, cache, transport string
	uringIssuer                                        string
	opts                                               optList
	debug, writeback, strictDIO, standby, uringLend    bool
	maxBackground                                      int
	grace, leaseTTL, ioBound, syncInterval             time.Duration
	etcd                                               etcdFlags
}

// DefaultVolumeSize is the size of the sparse data image that `sluice
// mount` creates when VOLUME does not exist: 16 GiB, of which only what is
// written takes host disk space. Use `sluice mkfs VOLUME --size SIZE` (or
// mount --size) for another size.
const DefaultVolumeSize = 16 << 30

// DefaultGrace is how long a SIGINT or SIGTERM waits for files open on the
// mount to be closed before it aborts the FUSE connection.
const DefaultGrace = 10 * time.Second

// optList collects -o options (repeatable, comma-separated). It is a
// pflag.Value.
type optList []string

func (o *optList) String() string { return strings.Join(*o, ",") }
func (o *optList) Type() string   { return "opts" }

func (o *optList) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*o = append(*o, p)
		}
	}
	return nil
}

// runMount serves VOLUME on DIR until it is unmounted or signalled.
//
// On the first SIGINT or SIGTERM it makes everything durable (SyncAll),
// unmounts (waiting up to --grace for files open on the mount to be
// closed, then aborting the FUSE connection), closes the engine (which
// writes back and syncs again) and exits 0. A second signal stops the
// waiting and aborts at once (exit 1); a third exits immediately.
func runMount(volDir, mnt string, f *mountFlags, stdout io.Writer) error {
	pol, err := sluice.ParsePolicy(f.policy)
	if err != nil {
		return &usageError{"--policy: " + err.Error()}
	}
	cacheBytes, err := volume.ParseSize(f.cacheSize)
	if err != nil {
		return &usageError{"--cache-size: " + err.Error()}
	}
	mode, err := fusefs.ParseCacheMode(f.cache)
	if err != nil {
		return &usageError{"--cache: " + err.Error()}
	}
	readOnly := false
	for _, o := range f.opts {
		if o == "ro" {
			readOnly = true
		}
	}
	if absVol, err := filepath.Abs(volDir); err == nil {
		volDir = absVol
	}
	if abs, err := filepath.Abs(mnt); err == nil {
		mnt = abs
	}
	logger := log.New(os.Stderr, "sluice: ", log.LstdFlags)

	// Refuse a bad mount point before creating or opening anything.
	if err := fusefs.CheckMountpoint(mnt); err != nil {
		return err
	}
	if err := createIfMissing(volDir, f.size, readOnly, stdout); err != nil {
		return err
	}
	if f.leaseTTL <= 0 || f.ioBound < 0 {
		return &usageError{"--lease-ttl must be positive and --lease-io-bound not negative"}
	}
	if f.syncInterval <= 0 {
		return fmt.Errorf("--sync-interval %v: must be positive", f.syncInterval)
	}
	eopts := &sluice.Options{Policy: &pol, CacheSizeBytes: cacheBytes, ReadOnly: readOnly, SyncInterval: f.syncInterval}
	// A standby waits in openEngine: a signal ends the wait.
	waitCtx, stopWait := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	lease := volume.LeaseOptions{TTL: f.leaseTTL, IOBound: f.ioBound, Standby: f.standby, Mount: mnt, Context: waitCtx,
		OnWait: func(h etcdkv.Holder) {
			fmt.Fprintf(stdout, "standby: volume %s is owned by %s; waiting until it unmounts or its lease expires\n", volDir, &h)
		}}
	eng, err := openEngine(volDir, eopts, &f.etcd, lease)
	stopWait()
	if err != nil {
		if waitCtx.Err() != nil && errors.Is(err, context.Canceled) {
			fmt.Fprintf(stdout, "standby: stopped waiting for volume %s\n", volDir)
			return nil
		}
		return volumeOpenError(volDir, err)
	}
	if own := eng.vol.Owner; own != nil {
		how := "released cleanly"
		if !own.Clean() {
			how = fmt.Sprintf("the previous owner's lease expired or was revoked: data I/O waits until %s", eng.vol.Fence.NotBefore().Format("15:04:05.000"))
		}
		fmt.Fprintf(stdout, "owner of volume %s: lease %x, TTL %v (%s)\n", volDir, own.ID(), own.TTL(), how)
		if r := eng.vol.Reservation; r != nil {
			fmt.Fprintf(stdout, "data device reservation: %s\n", r)
		}
	}
	transport, err := fuseserver.ParseTransport(f.transport)
	if err != nil {
		eng.Close()
		return &usageError{"--transport: " + err.Error()}
	}
	issuer, err := fuseuring.ParseIssuer(f.uringIssuer)
	if err != nil {
		eng.Close()
		return &usageError{"--uring-issuer: " + err.Error()}
	}
	fopts := &fusefs.Options{
		Transport:      transport,
		URingIssuer:    issuer,
		URingNoLend:    !f.uringLend,
		Cache:          mode,
		WritebackCache: f.writeback && mode == fusefs.KernelCache,
		StrictDirectIO: f.strictDIO,
		MaxBackground:  f.maxBackground,
		ReadOnly:       readOnly,
		MountOptions:   f.opts,
		FsName:         volDir,
		Debug:          f.debug,
		Logger:         logger,
	}
	var metricsSrv *http.Server
	if f.metrics != "" {
		fopts.Metrics = fusefs.NewMetrics()
		registerEtcdMetrics(fopts.Metrics.Registry(), eng.vol)
		metricsSrv, err = serveMetrics(f.metrics, fopts.Metrics, logger)
		if err != nil {
			eng.Close()
			return err
		}
		fmt.Fprintf(stdout, "metrics on http://%s/metrics, profiles on http://%s/debug/pprof/\n", f.metrics, f.metrics)
	}
	srv, err := fusefs.Mount(eng.FS, mnt, fopts)
	if err != nil {
		eng.Close()
		return err
	}
	tr, why := srv.Transport()
	fmt.Fprintf(os.Stderr, "sluice: FUSE transport %s: %s\n", tr, why)
	ctl, err := serveControl(volDir, eng.FS, logger)
	if err != nil {
		logger.Printf("%v; sluice scrub cannot reach this mount", err)
	}
	o := eng.Options()
	fmt.Fprintf(stdout, "mounted %s on %s (policy %s, cache %s, page cache %d MiB); stop with Ctrl-C or: sluice umount %s\n",
		volDir, mnt, o.Policy, mode, o.CacheSizeBytes>>20, mnt)

	lost := stopOnLoss(eng, srv, logger)
	forced := waitAndUnmount(srv, eng.FS, f.grace, logger)
	ctl.Close()
	if metricsSrv != nil {
		metricsSrv.Close()
	}
	if err := lost(); err != nil {
		eng.Close() // shut down: it writes nothing back
		return &exitError{code: 1, err: fmt.Errorf("lost the ownership of volume %s (%v): stopped serving %s", volDir, err, mnt)}
	}
	if err := eng.Close(); err != nil {
		return fmt.Errorf("closing volume %s: %w (run: sluice fsck %s)", volDir, err, volDir)
	}
	if forced {
		return &exitError{code: 1, err: fmt.Errorf("forced unmount of %s; volume %s closed cleanly", mnt, volDir)}
	}
	fmt.Fprintf(stdout, "unmounted %s; volume %s closed cleanly\n", mnt, volDir)
	return nil
}

// volumeEngine is the engine of a mount and the volume under it, which
// Close closes after the engine.
type volumeEngine struct {
	*sluice.FS
	vol *volume.Volume
}

func (e *volumeEngine) Close() error { return errors.Join(e.FS.Close(), e.vol.Close()) }

// openEngine opens the volume (with the etcd flags and the lease, for a
// volume whose metadata is in etcd) and starts the engine on it.
func openEngine(dir string, eopts *sluice.Options, ef *etcdFlags, lease volume.LeaseOptions) (*volumeEngine, error) {
	eo, err := ef.options()
	if err != nil {
		return nil, err
	}
	v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: eopts.ReadOnly, Device: eopts.Device, Etcd: eo, Lease: lease})
	if err != nil {
		return nil, err
	}
	fs, err := sluice.OpenVolume(v, eopts)
	if err != nil {
		v.Close()
		return nil, err
	}
	return &volumeEngine{FS: fs, vol: v}, nil
}

// stopOnLoss shuts the engine down and aborts the mount's FUSE connection
// if the volume's ownership is lost while it serves (Owner.Lost): the
// engine tries no more writes or commits (its Close writes nothing back),
// its users get ENOTCONN, and waitAndUnmount returns. The function it
// returns stops watching and reports the loss, if there was one; call it
// once the mount has ended and before the volume is closed (whose release
// is not a loss).
func stopOnLoss(eng *volumeEngine, srv *fusefs.Server, logger *log.Logger) func() error {
	own := eng.vol.Owner
	if own == nil {
		return func() error { return nil }
	}
	stop := make(chan struct{})
	var lost error
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-stop:
		case <-own.Lost():
			lost = own.Err()
			eng.Shutdown(fmt.Errorf("lost the ownership of the volume: %w", lost))
			logger.Printf("lost the ownership of the volume: %v; aborting the FUSE connection of %s", lost, srv.Dir())
			if err := srv.UnmountWith(fusefs.UnmountOptions{Force: true}); err != nil {
				logger.Printf("%v", err)
			}
		}
	}()
	return func() error {
		close(stop)
		<-done
		return lost
	}
}

// createIfMissing creates the volume directory dir with a sparse image of
// sizeFlag bytes if it does not exist (or is an empty directory), and says
// so.
func createIfMissing(dir, sizeFlag string, readOnly bool, stdout io.Writer) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a volume directory", dir)
	default:
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) > 0 {
			return nil // an existing volume (or sluice.Open says what is wrong)
		}
	}
	if readOnly {
		return fmt.Errorf("volume %s does not exist (create it first with: sluice mkfs %s --size 16G)", dir, dir)
	}
	size, err := volume.ParseSize(sizeFlag)
	if err != nil {
		return &usageError{"--size: " + err.Error()}
	}
	if err := volume.Mkfs(dir, volume.MkfsOptions{Size: size}); err != nil {
		return fmt.Errorf("creating volume %s: %w", dir, err)
	}
	fmt.Fprintf(stdout, "created volume %s: a %s sparse image (only what is written takes disk space); choose the size with --size or sluice mkfs\n",
		dir, humanBytes(size))
	return nil
}

func humanBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// serveMetrics listens on addr and serves /metrics and /debug/pprof/.
func serveMetrics(addr string, m *fusefs.Metrics, logger *log.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("metrics server: %v", err)
		}
	}()
	return srv, nil
}

// waitAndUnmount serves until the mount ends from outside or a signal
// asks for it to end, and reports whether the end was forced by a second
// signal.
func waitAndUnmount(srv *fusefs.Server, eng *sluice.FS, grace time.Duration, logger *log.Logger) bool {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var sig os.Signal
	select {
	case <-srv.Done():
		return false
	case sig = <-sigs:
	}
	logger.Printf("%v: writing back and syncing, then unmounting %s (another signal forces)", sig, srv.Dir())
	// Make everything written so far durable while the mount still serves:
	// if what follows has to be cut short, nothing acknowledged is lost.
	synced := make(chan error, 1)
	go func() {
		if eng.Options().ReadOnly {
			synced <- nil
			return
		}
		if srv.FS().Options().WritebackCache {
			syncfs(srv.Dir())
		}
		synced <- eng.SyncAll()
	}()
	select {
	case err := <-synced:
		if err != nil {
			logger.Printf("sync before unmount: %v", err)
		}
	case <-sigs:
		return forceUnmount(srv, sigs, logger)
	}
	deadline := time.After(grace)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	warned := false
	for {
		err := srv.Unmount()
		if err == nil {
			return false
		}
		if !errors.Is(err, syscall.EBUSY) {
			logger.Printf("%v", err)
		} else if !warned {
			logger.Printf("%d files are open on %s; waiting up to %v for them to be closed", srv.FS().OpenHandles(), srv.Dir(), grace)
			warned = true
		}
		select {
		case <-srv.Done():
			return false
		case <-tick.C:
		case <-deadline:
			logger.Printf("files still open on %s after %v: aborting the FUSE connection (their users get ENOTCONN)", srv.Dir(), grace)
			if err := srv.UnmountWith(fusefs.UnmountOptions{Force: true}); err != nil {
				logger.Printf("%v", err)
			}
			<-srv.Done()
			return false
		case <-sigs:
			return forceUnmount(srv, sigs, logger)
		}
	}
}

// forceUnmount aborts the FUSE connection and detaches the mount; a
// further signal exits at once.
func forceUnmount(srv *fusefs.Server, sigs <-chan os.Signal, logger *log.Logger) bool {
	logger.Printf("forcing: aborting the FUSE connection of %s", srv.Dir())
	go func() {
		<-sigs
		logger.Printf("exiting without closing the volume; the next mount recovers it")
		os.Exit(2)
	}()
	if err := srv.UnmountWith(fusefs.UnmountOptions{Force: true}); err != nil {
		logger.Printf("%v", err)
	}
	<-srv.Done()
	return true
}

// syncfs asks the kernel to write back its dirty pages of the mount (with
// the writeback cache they are only in the kernel) while it is served.
func syncfs(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	_ = unix.Syncfs(fd)
}
