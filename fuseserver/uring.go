package fuseserver

import (
	"errors"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice/internal/sys/fuseuring"
)

// uringTransport serves the kernel's FUSE-over-io_uring queues (one per
// possible CPU). Per queue, the owner thread (fuseuring.IssueOwner, the
// default) receives the requests (ring completions), serves on the spot
// those that cannot block it (handler.quick) and hands the others to the
// goroutine that owns their ring entry; that goroutine serves the request
// and commits the reply, which re-arms the entry for the next request.
// (With the other issuers a goroutine per queue waits for the requests
// and hands every one off.) Entry goroutines are started on an
// entry's first request and live as long as the connection: none is
// started per request. Reply data is built in the entry's payload buffer
// (a READ lands there straight from the engine) and WRITE data is served
// from it, so nothing is copied between the kernel's buffer and the
// device but by the device itself.
type uringTransport struct {
	s      *Server
	queues []*fuseuring.Queue
	wg     sync.WaitGroup
}

func uringSupported() error { return fuseuring.Supported() }

func uringEnable() (bool, error) {
	changed, err := fuseuring.Enable()
	if errors.Is(err, fs.ErrPermission) {
		return false, errors.New("FUSE over io_uring is off (/sys/module/fuse/parameters/enable_uring) and only root can turn it on")
	}
	return changed, err
}

// startURing registers the ring entries of every queue. The kernel holds
// requests back until every queue has its entries.
func startURing(s *Server) (*uringTransport, error) {
	page := os.Getpagesize()
	cfg := fuseuring.Config{
		Fd:          s.fd,
		Depth:       s.cfg.URingDepth,
		PayloadSize: fuseuring.MaxPayload(uint32(s.init.maxWrite), uint16(s.init.maxPages), page),
		Issuer:      s.cfg.URingIssuer,
	}
	qs, err := fuseuring.Start(cfg)
	if err != nil {
		return nil, err
	}
	return &uringTransport{s: s, queues: qs}, nil
}

func (u *uringTransport) start() {
	for _, q := range u.queues {
		u.wg.Add(1)
		go u.poll(q)
	}
}

func (u *uringTransport) wait() {
	u.wg.Wait()
	for _, q := range u.queues {
		_ = q.Close()
	}
}

// entryWorker serves the requests that arrive in one ring entry.
type entryWorker struct {
	u   *uringTransport
	q   *fuseuring.Queue
	ch  chan *fuseuring.Entry
	req request
	// ioEntry is the entry whose READ or WRITE the FileSystem queued
	// (AsyncQueued); ioDone, bound once, completes it. Set by the owner
	// before the call; the entry is not committed until ioDone runs.
	ioEntry *fuseuring.Entry
	ioDone  func(n int, st fuse.Status)
	// handedOff counts the queue's requests on entry goroutines.
	handedOff *atomic.Int64
}

// poll serves q: with the owner issuer, the queue's owner thread calls
// dispatch with every batch that arrived (fuseuring.Queue.Serve); with
// the others, this goroutine waits for the batches itself.
func (u *uringTransport) poll(q *fuseuring.Queue) {
	defer u.wg.Done()
	var workers sync.WaitGroup
	owners := make(map[*fuseuring.Entry]*entryWorker)
	defer func() {
		for _, w := range owners {
			close(w.ch)
		}
		workers.Wait()
	}()
	owned := u.s.cfg.URingIssuer == fuseuring.IssueOwner
	var handedOff atomic.Int64 // requests of q on entry goroutines
	dispatch := func(batch []*fuseuring.Entry) {
		alone := len(batch) == 1 && handedOff.Load() == 0
		for _, e := range batch {
			w := owners[e]
			if w == nil {
				w = &entryWorker{u: u, q: q, ch: make(chan *fuseuring.Entry, 1), handedOff: &handedOff}
				w.req.slot = u.s.newSlot()
				w.ioDone = w.completeIO
				owners[e] = w
				workers.Add(1)
				go func() {
					defer workers.Done()
					w.run()
				}()
			}
			u.s.uringRequests.Add(1)
			if owned && w.serveOnOwner(e, alone) {
				continue
			}
			handedOff.Add(1)
			w.ch <- e
		}
	}
	var err error
	if owned {
		err = q.Serve(dispatch)
	} else {
		var batch []*fuseuring.Entry
		for err == nil {
			batch, err = q.Wait(batch[:0])
			dispatch(batch)
		}
	}
	if !errors.Is(err, fuseuring.ErrStopped) && !errors.Is(err, fuseuring.ErrClosed) {
		u.s.logger.Printf("fuseserver: io_uring queue %d: %v", q.Queue(), err)
	}
}

func (w *entryWorker) run() {
	for e := range w.ch {
		w.serve(e)
		w.handedOff.Add(-1)
	}
}

// serveOnOwner serves the request in e on the queue's owner thread if it
// is quick (handler.quick), or starts it there if it is a READ or WRITE
// the FileSystem can start without blocking (AsyncIO), and reports
// whether it did. Otherwise the request goes to the entry's goroutine,
// which decodes it again. A metadata commit (handler.commits) is served
// there too when alone is set: it is the only request of its batch and
// none of the queue's is on an entry goroutine. The entry's request
// struct is free: its goroutine touches it only between receiving an
// entry and committing it, and a queued READ or WRITE holds the entry
// until its completion commits it.
func (w *entryWorker) serveOnOwner(e *fuseuring.Entry, alone bool) bool {
	hdr := e.InHeader()
	op := (*fuse.InHeader)(unsafe.Pointer(&hdr[0])).Opcode
	async := w.u.s.async
	if op >= opCount {
		return false
	}
	commit := alone && handlers[op].commits
	if handlers[op].quick == nil && !commit && (async == nil || (op != opRead && op != opWrite)) {
		return false
	}
	r := &w.req
	payload := e.Payload()
	r.buf = payload
	h, ok := r.decode(hdr[:inHeaderSize], e.OpIn(), payload[:e.PayloadLen()])
	if !ok || h.quick != nil || commit {
		if ok && !commit && !h.quick(r) {
			return false
		}
		w.u.s.uringInline.Add(1)
		w.answer(e, h, ok)
		return true
	}
	if w.u.s.probe.active.Load() {
		return false // the POLL probe answers its own requests
	}
	w.ioEntry = e
	var res AsyncResult
	var n int
	var st fuse.Status
	// A NOWAIT start never waits for I/O, so the queue's ring may carry
	// its device I/O (fuseuring.Queue.Lend).
	w.q.Lend(!w.u.s.cfg.URingNoLend)
	if op == opRead {
		rin := in[fuse.ReadIn](r)
		res, n, st = async.TryRead(rin, r.dataBuf(int(rin.Size)), w.ioDone)
	} else {
		res, n, st = async.TryWrite(in[fuse.WriteIn](r), r.payload, w.ioDone)
	}
	w.q.Lend(false)
	switch res {
	case AsyncDone:
		w.u.s.uringInline.Add(1)
		w.completeIO(n, st)
	case AsyncQueued:
		w.u.s.uringInline.Add(1)
	default:
		w.ioEntry = nil
		return false
	}
	return true
}

// completeIO answers the READ or WRITE started by serveOnOwner with n
// bytes and status st, and commits it: on the owner thread when it
// completed there, on the device's completion goroutine when it was
// queued.
func (w *entryWorker) completeIO(n int, st fuse.Status) {
	e := w.ioEntry
	w.ioEntry = nil
	r := &w.req
	r.status = st
	if st.Ok() {
		if r.header().Opcode == opRead {
			r.replyData(r.buf[:n])
		} else {
			out[fuse.WriteOut](r).Size = uint32(n)
		}
	}
	w.commit(e)
}

// serve decodes the request in e, serves it and commits the reply.
func (w *entryWorker) serve(e *fuseuring.Entry) {
	r := &w.req
	hdr := e.InHeader()
	payload := e.Payload()
	r.buf = payload
	h, ok := r.decode(hdr[:inHeaderSize], e.OpIn(), payload[:e.PayloadLen()])
	w.answer(e, h, ok)
}

// answer serves the decoded request in e (unless decoding failed: ok
// false, the status is set) and commits the reply.
func (w *entryWorker) answer(e *fuseuring.Entry, h *handler, ok bool) {
	r := &w.req
	if ok {
		w.u.s.serve(r, h) // FORGET never travels on the ring: every request is answered
	}
	w.commit(e)
}

// commit writes the reply of the request in e into e's buffers and
// commits it.
func (w *entryWorker) commit(e *fuseuring.Entry) {
	r := &w.req
	hdr := e.InHeader()
	payload := e.Payload()
	op := r.header().Opcode
	r.outHeader(hdr)
	n := 0
	if r.status.Ok() {
		n = copy(payload, r.outBytes())
		if len(r.data) > 0 {
			if &r.data[0] != &payload[n] {
				copy(payload[n:], r.data) // copy is memmove: data may already lie in payload
			}
			n += len(r.data)
		}
	}
	if err := w.q.Commit(e, n); err != nil && !errors.Is(err, fuseuring.ErrStopped) && !errors.Is(err, fuseuring.ErrClosed) {
		w.u.s.logger.Printf("fuseserver: answering %s on io_uring: %v", opName(op), err)
	}
}

// uringBorrowed sums the device I/Os the queues' rings carried.
func (s *Server) uringBorrowed() uint64 {
	if s.uring == nil {
		return 0
	}
	var n uint64
	for _, q := range s.uring.queues {
		n += q.Borrows()
	}
	return n
}
