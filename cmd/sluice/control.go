package main

// The control endpoint of a mount. While `sluice mount` serves a volume it
// holds the volume's lock, so a command that must act on the mounted file
// system (sluice scrub) asks the mount to do it: the mount serves HTTP on
// the unix socket VOLUME/control, which only the mounting user may connect
// to (mode 0600). The protocol is one request:
//
//	POST /scrub?rate=BYTES
//
// scrubs the mounted file system (sluice.FS.Scrub), reading at most BYTES
// a second (a number, optionally with a K, M, G or T suffix; 0: no limit;
// absent: defaultOnlineScrubRate), and answers 200 with the
// sluice.ScrubReport as JSON once it is done. Anything else is an error
// status with a one-line text message: 400 a bad rate, 405 a method other
// than POST, 409 a scrub already running (one at a time), 500 the scrub
// failed, 503 the mount is ending. A scrub stops when its client goes away
// (the connection closes) or the mount ends.
//
// The socket appears at mount, once the FUSE mount serves, replacing a
// stale one a killed mount left, and goes at unmount.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/volume"
)

// controlSocketName is the name of the control socket in the volume
// directory.
const controlSocketName = "control"

// defaultOnlineScrubRate caps an online scrub's device reads, in bytes per
// second, unless the request says otherwise: 64 MiB/s leaves the device to
// the mount's users.
const defaultOnlineScrubRate = 64 << 20

// controlSocketPath is VOLUME/control.
func controlSocketPath(volDir string) string { return filepath.Join(volDir, controlSocketName) }

// controlServer serves a mount's control socket.
type controlServer struct {
	// Immutable once serveControl returns.
	fs     *sluice.FS
	path   string      // VOLUME/control
	sock   os.FileInfo // the socket at path, which Close removes
	srv    *http.Server
	ctx    context.Context // done when Close begins: ends a running scrub
	cancel context.CancelFunc
	logger *log.Logger

	// scrubbing is held while a scrub runs (one at a time).
	scrubbing sync.Mutex
}

// serveControl serves the control socket of the volume in volDir, whose
// file system is fs, until Close.
func serveControl(volDir string, fs *sluice.FS, logger *log.Logger) (*controlServer, error) {
	path := controlSocketPath(volDir)
	ln, sock, err := listenControl(path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &controlServer{fs: fs, path: path, sock: sock, ctx: ctx, cancel: cancel, logger: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /scrub", c.serveScrub)
	c.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		if err := c.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("control socket %s: %v", path, err)
		}
	}()
	return c, nil
}

// listenControl listens on a unix socket at path that only this user may
// connect to from the moment it appears there: it is bound in a private
// directory (mode 0700) beside path, made 0600 and renamed onto path,
// replacing whatever a killed mount left. It returns the listener and the
// socket's FileInfo, which Close compares before removing path.
func listenControl(path string) (*net.UnixListener, os.FileInfo, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".control-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	ln.SetUnlinkOnClose(false) // it moves; Close removes path
	err = os.Chmod(bound, 0o600)
	if err == nil {
		err = os.Rename(bound, path)
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = os.Lstat(path)
	}
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	return ln, fi, nil
}

// Close ends a running scrub, stops serving and removes the socket, unless
// another mount of the volume (a standby that took it over) has put its own
// there meanwhile. A nil server does nothing.
func (c *controlServer) Close() {
	if c == nil {
		return
	}
	c.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.srv.Shutdown(ctx); err != nil {
		c.srv.Close()
	}
	if fi, err := os.Lstat(c.path); err == nil && os.SameFile(fi, c.sock) {
		os.Remove(c.path)
	}
}

// serveScrub serves POST /scrub?rate=BYTES.
func (c *controlServer) serveScrub(w http.ResponseWriter, r *http.Request) {
	rate := int64(defaultOnlineScrubRate)
	if s := r.URL.Query().Get("rate"); s != "" {
		n, err := volume.ParseSize(s)
		if err != nil {
			http.Error(w, "rate: "+err.Error()+" (bytes per second; 0: no limit)", http.StatusBadRequest)
			return
		}
		rate = n
	}
	if !c.scrubbing.TryLock() {
		http.Error(w, "a scrub of this mount is already running", http.StatusConflict)
		return
	}
	defer c.scrubbing.Unlock()
	rep, err := c.fs.Scrub(r.Context(), sluice.ScrubOptions{BytesPerSecond: rate})
	switch {
	case err != nil && c.ctx.Err() != nil:
		http.Error(w, "the mount is ending: "+err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		c.logger.Printf("scrub: %v", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if rep.DataChecksums {
		c.logger.Printf("scrub: %d files, %d blocks, %d damaged files, in %v", rep.Files, rep.Blocks, len(rep.Damaged), rep.Elapsed.Round(time.Millisecond))
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}
