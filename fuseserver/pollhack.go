package fuseserver

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The poll probe. Go's runtime adds every file a program opens to its
// epoll set, and on FUSE epoll_ctl(2) sends FUSE_POLL and waits for the
// answer inside a raw system call that keeps its scheduler slot. A process
// that serves a mount and opens files on it (tests, embedded users) can
// then have every slot waiting for FUSE_POLL answers that only its own
// goroutines could give: the process deadlocks. Once a server answers
// POLL with ENOSYS the kernel never sends it again (fc->no_poll), so Mount
// makes that happen first, alone: it looks up a name that only the server
// knows, opens it, and adds it to an epoll set (go-fuse does the same).
const (
	pollProbeName = ".sluice-poll-probe"
	pollProbeNode = ^uint64(0) - 1 // never an engine inode number
)

// pollProbe answers the probe's requests while it runs.
type pollProbe struct{ active atomic.Bool }

// serve answers r if it is part of the probe.
func (p *pollProbe) serve(r *request) bool {
	if !p.active.Load() {
		return false
	}
	hdr := r.header()
	switch {
	case hdr.Opcode == opLookup && hdr.NodeId == fuse.FUSE_ROOT_ID && r.name() == pollProbeName:
		e := out[fuse.EntryOut](r)
		e.NodeId = pollProbeNode
		e.Attr = probeAttr()
		return true
	case hdr.NodeId != pollProbeNode:
		return false
	}
	switch hdr.Opcode {
	case opGetattr:
		out[fuse.AttrOut](r).Attr = probeAttr()
	case opOpen, opFlush, opRelease, opForget, opBatchForget:
	default:
		r.status = fuse.ENOSYS // POLL among them
		r.outLen = 0
	}
	return true
}

func probeAttr() fuse.Attr {
	return fuse.Attr{Ino: pollProbeNode, Mode: unix.S_IFREG | 0o444, Nlink: 1}
}

// probePoll opens the probe and polls it, so that the kernel learns that
// this server does not answer POLL.
func (s *Server) probePoll() error {
	s.probe.active.Store(true)
	defer s.probe.active.Store(false)
	fd, err := unix.Open(filepath.Join(s.dir, pollProbeName), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("poll probe: %w", err)
	}
	defer unix.Close(fd)
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("poll probe: %w", err)
	}
	defer unix.Close(ep)
	// Not unix.EpollCtl: it is a raw system call, which keeps this
	// goroutine's scheduler slot while the kernel waits for the POLL
	// answer, and a garbage collection stopping the world would then wait
	// for that slot while the answer waits for the collection: the very
	// deadlock the probe is there to prevent. Whatever epoll_ctl returns,
	// the kernel has had its answer.
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	_, _, _ = unix.Syscall6(unix.SYS_EPOLL_CTL, uintptr(ep), unix.EPOLL_CTL_ADD, uintptr(fd), uintptr(unsafe.Pointer(&ev)), 0, 0)
	runtime.KeepAlive(&ev)
	return nil
}
