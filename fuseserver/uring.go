package fuseserver

import (
	"errors"
	"io/fs"
	"os"
	"sync"

	"github.com/sluicefs/sluice/internal/sys/fuseuring"
)

// uringTransport serves the kernel's FUSE-over-io_uring queues (one per
// possible CPU). Per queue, one goroutine waits for requests (ring
// completions) and hands each to the goroutine that owns its ring entry;
// that goroutine serves the request and commits the reply, which re-arms
// the entry for the next request. Entry goroutines are started on an
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
}

// poll waits for requests on q and hands them to their entries' workers.
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
	var batch []*fuseuring.Entry
	for {
		var err error
		batch, err = q.Wait(batch[:0])
		for _, e := range batch {
			w := owners[e]
			if w == nil {
				w = &entryWorker{u: u, q: q, ch: make(chan *fuseuring.Entry, 1)}
				w.req.slot = u.s.newSlot()
				owners[e] = w
				workers.Add(1)
				go func() {
					defer workers.Done()
					w.run()
				}()
			}
			w.ch <- e
		}
		if err != nil {
			if !errors.Is(err, fuseuring.ErrStopped) && !errors.Is(err, fuseuring.ErrClosed) {
				u.s.logger.Printf("fuseserver: io_uring queue %d: %v", q.Queue(), err)
			}
			return
		}
	}
}

func (w *entryWorker) run() {
	for e := range w.ch {
		w.u.s.uringRequests.Add(1)
		w.serve(e)
	}
}

// serve decodes the request in e, serves it and commits the reply.
func (w *entryWorker) serve(e *fuseuring.Entry) {
	r := &w.req
	hdr := e.InHeader()
	payload := e.Payload()
	r.buf = payload
	h, ok := r.decode(hdr[:inHeaderSize], e.OpIn(), payload[:e.PayloadLen()])
	if ok {
		w.u.s.serve(r, h) // FORGET never travels on the ring: every request is answered
	}
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
		w.u.s.logger.Printf("fuseserver: answering %s on io_uring: %v", opName(r.header().Opcode), err)
	}
}
