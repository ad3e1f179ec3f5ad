package fuseserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// devFuse is the /dev/fuse transport: goroutines that each read a request
// with read(2), serve it and write the reply with writev(2). They are
// started as the load needs them (when the last idle one takes a
// request) up to Config.MaxReaders, and live as long as the connection:
// no goroutine is started per request. Under io_uring only INTERRUPT and
// FORGET (and anything sent before the rings are ready) arrive here.
type devFuse struct {
	s *Server

	idle, total atomic.Int32
	wg          sync.WaitGroup
	ended       atomic.Bool
}

func newDevFuse(s *Server) *devFuse { return &devFuse{s: s} }

// devReader is one reader's memory: one mmap'd buffer, so that a WRITE's
// data lands page-aligned and READ replies are built in place.
//
//	[0, page-writeHdr)          unused
//	[page-writeHdr, ...)        the request as read(2) returns it: header,
//	                            in-struct and payload; a WRITE's data
//	                            starts at page
//	[2*page, 2*page+maxWrite)   reply data (READ, READDIR, xattrs)
type devReader struct {
	d    *devFuse
	mem  []byte
	rbuf []byte // where requests are read
	req  request
	hdr  [outHeaderSize + maxOutSize]byte
	iov  [2]unix.Iovec
}

// writeHdr is the size of a WRITE's header and in-struct.
var writeHdr = int(unsafe.Sizeof(fuse.WriteIn{}))

// minReadBuffer is FUSE_MIN_READ_BUFFER: the kernel refuses smaller reads.
const minReadBuffer = 8192

func (d *devFuse) newReader() (*devReader, error) {
	page := os.Getpagesize()
	maxWrite := max(d.s.cfg.MaxWrite, minReadBuffer)
	size := 2*page + maxWrite + page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("reader buffer: %w", err)
	}
	rd := &devReader{d: d, mem: mem}
	rd.rbuf = mem[page-writeHdr : page+maxWrite]
	rd.req.buf = mem[2*page : 2*page+maxWrite]
	rd.req.slot = d.s.newSlot()
	return rd, nil
}

func (rd *devReader) free() { _ = unix.Munmap(rd.mem) }

// read reads one request. It returns errStopped once the connection has
// ended; it retries every other error (logging the unexpected ones, at
// most once a second): a reader that gave up could leave the mount with
// nobody reading it.
func (rd *devReader) read() (int, error) {
	for {
		n, err := unix.Read(rd.d.s.fd, rd.rbuf)
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			// EAGAIN: another reader took the request.
		case errors.Is(err, unix.ENOENT):
			// The request was interrupted before it was read.
		case errors.Is(err, unix.ENODEV):
			return 0, errStopped
		default:
			rd.d.s.logEvery(fmt.Sprintf("fuseserver: reading /dev/fuse: %v", err))
			time.Sleep(time.Millisecond)
		}
	}
}

// answerInit reads the kernel's INIT and answers it; the mount is usable
// once it returns.
func (d *devFuse) answerInit(offerURing bool) error {
	rd, err := d.newReader()
	if err != nil {
		return err
	}
	defer rd.free()
	n, err := rd.read()
	if err != nil {
		return err
	}
	d.s.devRequests.Add(1)
	r := &rd.req
	h, ok := r.decode(rd.rbuf[:inHeaderSize], rd.rbuf[inHeaderSize:n], nil)
	if h == nil || r.header().Opcode != opInit {
		return fmt.Errorf("first request is %s, not INIT", opName(r.header().Opcode))
	}
	if !ok {
		// Kernels before 7.36 send a shorter fuse_init_in; the rest
		// reads as zero (decode copied what there was).
		copy(r.inBytes()[inHeaderSize:], rd.rbuf[inHeaderSize:n])
	}
	neg, err := d.s.initReply(in[fuse.InitIn](r), out[fuse.InitOut](r), offerURing)
	if err != nil {
		r.status = fuse.Status(unix.EPROTO)
		r.outLen = 0
		rd.reply()
		return err
	}
	r.status = fuse.OK
	r.outLen = handlers[opInit].outSize
	if err := rd.reply(); err != nil {
		return fmt.Errorf("answering INIT: %w", err)
	}
	d.s.init = neg
	return nil
}

// start starts the first readers.
func (d *devFuse) start() {
	d.spawn()
}

// spawn starts one more reader unless MaxReaders are running.
func (d *devFuse) spawn() {
	if d.ended.Load() || int(d.total.Add(1)) > d.s.cfg.MaxReaders {
		d.total.Add(-1)
		return
	}
	d.wg.Add(1)
	go d.loop()
}

// wait returns once every reader has ended.
func (d *devFuse) wait() { d.wg.Wait() }

func (d *devFuse) loop() {
	defer d.wg.Done()
	rd, err := d.newReader()
	if err != nil {
		d.s.logger.Printf("fuseserver: %v", err)
		d.total.Add(-1)
		return
	}
	defer rd.free()
	for {
		d.idle.Add(1)
		n, err := rd.read()
		if d.idle.Add(-1) == 0 && err == nil {
			d.spawn() // every other reader is busy
		}
		if err != nil {
			d.ended.Store(true)
			return
		}
		d.s.devRequests.Add(1)
		rd.serve(n)
	}
}

// serve decodes, serves and answers the request in rbuf[:n].
func (rd *devReader) serve(n int) {
	msg := rd.rbuf[:n]
	if n < inHeaderSize {
		rd.d.s.logger.Printf("fuseserver: short request (%d bytes)", n)
		return
	}
	body := msg[inHeaderSize:]
	k := 0
	if op := binary.LittleEndian.Uint32(msg[4:8]); op < opCount && handlers[op].inSize > inHeaderSize {
		k = min(handlers[op].inSize-inHeaderSize, len(body))
	}
	r := &rd.req
	h, ok := r.decode(msg[:inHeaderSize], body, body[k:])
	if ok && !rd.d.s.serve(r, h) {
		return
	}
	if err := rd.reply(); err != nil && !errors.Is(err, unix.ENOENT) {
		// ENOENT: the request was interrupted and the kernel no
		// longer waits for the answer.
		rd.d.s.logger.Printf("fuseserver: answering %s: %v", opName(r.header().Opcode), err)
	}
}

// reply writes the reply to /dev/fuse: header and fixed struct from one
// buffer, data from where it was built, in one writev(2).
func (rd *devReader) reply() error {
	r := &rd.req
	r.outHeader(rd.hdr[:])
	n := outHeaderSize
	if r.status.Ok() {
		n += copy(rd.hdr[outHeaderSize:], r.outBytes())
	}
	rd.iov[0].Base = &rd.hdr[0]
	rd.iov[0].SetLen(n)
	cnt := 1
	if r.status.Ok() && len(r.data) > 0 {
		rd.iov[1].Base = &r.data[0]
		rd.iov[1].SetLen(len(r.data))
		cnt = 2
	}
	for {
		_, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(rd.d.s.fd), uintptr(unsafe.Pointer(&rd.iov[0])), uintptr(cnt))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}
