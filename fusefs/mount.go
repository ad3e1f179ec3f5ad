package fusefs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/fuseserver"
	"github.com/sluicefs/sluice/internal/sys/mountinfo"
)

// Mount problems that CheckMountpoint reports; errors.Is works on the
// errors it returns.
var (
	// ErrStaleMount: the directory is a FUSE mount whose daemon died
	// (stat fails with ENOTCONN, "transport endpoint is not connected", or
	// ECONNABORTED; see ConnectionGone).
	ErrStaleMount = errors.New("stale mount")
	// ErrNoMountpoint: the directory does not exist.
	ErrNoMountpoint = errors.New("mount point does not exist")
	// ErrNotDir: the mount point is not a directory.
	ErrNotDir = errors.New("mount point is not a directory")
	// ErrMounted: a sluice file system is already mounted there.
	ErrMounted = errors.New("already mounted")
)

// CheckMountpoint reports why dir cannot be mounted on, or nil: a stale
// mount left by a killed daemon (with the command that clears it), a
// missing directory, a file, or a live sluice mount.
func CheckMountpoint(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case ConnectionGone(err):
		return fmt.Errorf("%s: %w left by a sluice daemon that died (transport endpoint is not connected); clear it with: sluice umount %s (or: fusermount3 -u %s)",
			dir, ErrStaleMount, dir, dir)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: %w (create it with: mkdir -p %s)", dir, ErrNoMountpoint, dir)
	case err != nil:
		return fmt.Errorf("mount point %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s: %w", dir, ErrNotDir)
	}
	if m, ok := FindMount(dir); ok && strings.HasPrefix(m.FSType, "fuse.sluice") {
		return fmt.Errorf("%s: %w (volume %s); unmount it first with: sluice umount %s", dir, ErrMounted, m.Source, dir)
	}
	return nil
}

// ConnectionGone reports whether err is what a FUSE mount whose daemon
// died answers: ENOTCONN, or ECONNABORTED while the kernel is still
// tearing down an io_uring connection (a request that meets the aborted
// rings fails with it).
func ConnectionGone(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED)
}

// MountInfo describes one mount from /proc/self/mountinfo: its mount
// point (Point), type (FSType, "fuse.sluice" for sluice), source (Source,
// the volume directory for `sluice mount`) and options.
type MountInfo = mountinfo.Mount

// FindMount returns the topmost mount on dir, if dir is a mount point.
func FindMount(dir string) (MountInfo, bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return MountInfo{}, false
	}
	t, err := mountinfo.Read()
	if err != nil {
		return MountInfo{}, false
	}
	return t.At(abs)
}

// Server is a mounted sluice file system being served.
type Server struct {
	fs  *FS
	srv *fuseserver.Server
	dir string

	unmountMu sync.Mutex
}

// capabilities are the INIT flags sluice asks the kernel for on top of
// the server's base set (fuseserver's doc has the whole table):
//
//   - ASYNC_DIO: libaio and io_uring O_DIRECT I/O stays asynchronous, so a
//     queue depth of 32 reaches the daemon as 32 requests in flight;
//   - HANDLE_KILLPRIV_V2: the engine clears set-user-ID and capabilities on
//     write, so the kernel does not ask for security.capability before
//     every write (which serialises writers);
//   - DIRECT_IO_ALLOW_MMAP: files answered FOPEN_DIRECT_IO can still be
//     mmapped (shared writable mappings too);
//   - CACHE_SYMLINKS: a symlink's target never changes.
//
// Passthrough is not asked for: sluice's files are extents on a device,
// not host files, and negotiating it would limit stacking other file
// systems on the mount.
const capabilities = fuse.CAP_ASYNC_DIO | fuse.CAP_HANDLE_KILLPRIV_V2 |
	fuse.CAP_DIRECT_IO_ALLOW_MMAP | fuse.CAP_CACHE_SYMLINKS

// Mount mounts eng on dir and serves it until Unmount (or an unmount from
// outside). It checks dir with CheckMountpoint first. As root it calls
// mount(2) itself, and the mount is open to every user unless o.Access
// says otherwise; any other user mounts through fusermount3, and the
// mount is that user's alone unless o asks for allow_other (see Access and
// Options.MountOptions). The kernel checks permissions against the modes
// sluice reports (default_permissions) either way.
func Mount(eng *sluice.FS, dir string, o *Options) (*Server, error) {
	fs, err := New(eng, o)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := CheckMountpoint(abs); err != nil {
		return nil, err
	}
	cfg, err := fs.serverConfig(os.Geteuid())
	if err != nil {
		return nil, fmt.Errorf("mounting on %s: %w", abs, err)
	}
	srv, err := fuseserver.Mount(fs, abs, cfg)
	if err != nil {
		return nil, err
	}
	return &Server{fs: fs, srv: srv, dir: abs}, nil
}

// serverConfig builds the FUSE server's configuration for a mount made by
// a process with effective user ID euid (see resolveMount).
func (fs *FS) serverConfig(euid int) (fuseserver.Config, error) {
	o := &fs.opts
	km, err := resolveMount(o, euid)
	if err != nil {
		return fuseserver.Config{}, err
	}
	cfg := fuseserver.Config{
		Name:          "sluice",
		FsName:        o.FsName,
		MaxWrite:      o.MaxWrite,
		MaxBackground: o.MaxBackground,
		MaxReadAhead:  max(o.ReadAhead, 0),
		DirtyRatio:    max(o.DirtyRatio, 0),
		Capabilities:  capabilities,
		Transport:     o.Transport,
		URingDepth:    o.URingDepth,
		URingIssuer:   o.URingIssuer,
		URingNoLend:   o.URingNoLend,
		MountFlags:    km.flags,
		Options:       km.options,
		AllowOther:    km.allowOther,
		// Root calls mount(2) itself, with these flags; a refusal is
		// reported as the kernel's.
		Fusermount:   euid != 0,
		Logger:       o.Logger,
		PanicHandler: fs.panicHandler,
		Debug:        o.Debug,
	}
	if o.WritebackCache {
		cfg.Capabilities |= fuse.CAP_WRITEBACK_CACHE
	}
	return cfg, nil
}

// Transport returns the FUSE transport in use and why it was chosen.
func (s *Server) Transport() (fuseserver.Transport, string) { return s.srv.Transport() }

// Stats returns the FUSE server's counters (requests per transport,
// interrupts).
func (s *Server) Stats() fuseserver.Stats { return s.srv.Stats() }

// FS returns the file system being served.
func (s *Server) FS() *FS { return s.fs }

// Dir returns the absolute mount point.
func (s *Server) Dir() string { return s.dir }

// Done is closed when the mount has ended: after Unmount, an unmount from
// outside, or an abort.
func (s *Server) Done() <-chan struct{} { return s.srv.Done() }

// Unmount unmounts and waits for the serve loop to end. It fails with
// EBUSY while files are open on the mount; see UnmountOptions for lazy and
// forced unmounts. The engine stays open: close it afterwards.
func (s *Server) Unmount() error { return s.UnmountWith(UnmountOptions{}) }

// UnmountWith is Unmount with options.
func (s *Server) UnmountWith(o UnmountOptions) error {
	s.unmountMu.Lock()
	defer s.unmountMu.Unlock()
	select {
	case <-s.srv.Done():
		return nil
	default:
	}
	if err := Unmount(s.dir, o); err != nil {
		return err
	}
	if o.Lazy && !o.Force {
		return nil // the mount ends when its last file is closed
	}
	<-s.srv.Done()
	return nil
}

// UnmountOptions configures Unmount.
type UnmountOptions struct {
	// Lazy detaches the mount from the directory tree at once; it ends
	// when the last file open on it is closed (umount -l, MNT_DETACH).
	Lazy bool
	// Force aborts the FUSE connection first: every request in flight and
	// every later one on the mount fails with ENOTCONN (umount -f), and
	// detaches the mount (Force implies Lazy), so the mount ends at once
	// even with files open.
	Force bool
}

// Unmount unmounts the sluice (or any FUSE) mount on dir. As root it calls
// umount2(2); otherwise it runs fusermount3 -u (-z for Lazy). A stale
// mount (ENOTCONN) is detached lazily, which always succeeds.
func Unmount(dir string, o UnmountOptions) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); ConnectionGone(err) {
		o.Lazy = true
	}
	if o.Force {
		o.Lazy = true
		if os.Geteuid() != 0 {
			abortConnection(abs)
		}
	}
	if os.Geteuid() == 0 {
		if o.Force {
			// MNT_FORCE makes the kernel abort the FUSE connection
			// (fuse_umount_begin); the unmount itself may still be busy.
			if err := unix.Unmount(abs, unix.MNT_FORCE); err == nil {
				return nil
			}
		}
		flags := 0
		if o.Lazy {
			flags |= unix.MNT_DETACH
		}
		if err := unix.Unmount(abs, flags); err != nil {
			return describeUnmountError(abs, err)
		}
		return nil
	}
	args := []string{"-u"}
	if o.Lazy {
		args = append(args, "-z")
	}
	out, err := exec.Command("fusermount3", append(args, abs)...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if strings.Contains(msg, "busy") {
			return describeUnmountError(abs, syscall.EBUSY)
		}
		return fmt.Errorf("fusermount3 -u %s: %v: %s", abs, err, msg)
	}
	return nil
}

func describeUnmountError(dir string, err error) error {
	switch {
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("unmounting %s: %w (files are open on it; close them, or detach it now with: sluice umount --lazy %s)", dir, err, dir)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("unmounting %s: %w (it is not a mount point)", dir, err)
	}
	return fmt.Errorf("unmounting %s: %w", dir, err)
}

// abortConnection aborts the FUSE connection of the mount on dir through
// the fusectl file system (/sys/fs/fuse/connections/N/abort, writable by
// the user who mounted), if it is mounted. Best effort.
func abortConnection(dir string) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return
	}
	p := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Minor(st.Dev))
	_ = os.WriteFile(p, []byte("1"), 0)
}
