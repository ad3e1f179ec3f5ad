package fuseserver

import (
	"sync"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// request is one FUSE request being served. A transport owns a fixed set
// of them (one per /dev/fuse reader, one per io_uring entry) and reuses
// them: serving a request allocates nothing of its own.
//
// The transport fills in (the header and the opcode's in-struct, copied
// contiguously, because go-fuse's in types embed the header), payload (a
// view of what follows the in-struct: names, WRITE data) and buf (where
// reply data may be built: on io_uring the ring entry's payload buffer).
// serve fills status, the fixed reply struct in out[:outLen] and data.
type request struct {
	in      [maxInSize / 8]uint64 // header + in-struct; uint64s for alignment
	payload []byte
	buf     []byte

	status fuse.Status
	out    [maxOutSize / 8]uint64
	outLen int
	data   []byte

	slot *slot // the interrupt slot of the goroutine serving it
}

// header returns the request's fuse_in_header.
func (r *request) header() *fuse.InHeader { return (*fuse.InHeader)(unsafe.Pointer(&r.in[0])) }

// inBytes is the header and in-struct area as bytes.
func (r *request) inBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&r.in[0])), maxInSize)
}

// outBytes is the fixed reply struct as bytes.
func (r *request) outBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&r.out[0])), maxOutSize)[:r.outLen]
}

// decode sets up r for a request whose header is hdr (inHeaderSize bytes),
// whose in-struct is arg and whose payload is payload. It reports false,
// with r.status set, for a request that is malformed or unknown.
func (r *request) decode(hdr, arg, payload []byte) (*handler, bool) {
	ib := r.inBytes()
	copy(ib, hdr[:inHeaderSize])
	op := r.header().Opcode
	r.payload = payload
	r.status = fuse.OK
	r.data = nil
	var h *handler
	if op < opCount {
		h = &handlers[op]
	}
	if h == nil || h.inSize == 0 {
		r.outLen = 0
		r.status = fuse.ENOSYS
		return nil, false
	}
	n := h.inSize - inHeaderSize
	if len(arg) < n {
		r.outLen = 0
		r.status = fuse.EIO
		return h, false
	}
	copy(ib[inHeaderSize:h.inSize], arg[:n])
	// go-fuse's type may be longer than the kernel's struct (RENAME's
	// RenameIn, SETXATTR's SetXAttrIn): the rest reads as zero, never as
	// the previous request.
	clear(ib[h.inSize:])
	clear(r.out[:(h.outSize+7)/8])
	r.outLen = h.outSize
	return h, true
}

// dataBuf returns where reply data of up to n bytes is to be built.
func (r *request) dataBuf(n int) []byte {
	if n > len(r.buf) {
		n = len(r.buf)
	}
	return r.buf[:n]
}

// replyData sets the reply's data.
func (r *request) replyData(d []byte) { r.data = d }

// cancel returns the channel closed when the kernel interrupts the request.
func (r *request) cancel() <-chan struct{} { return r.slot.cancel() }

// replyLen is the reply's length after the out header: nothing for an
// error.
func (r *request) replyLen() int {
	if !r.status.Ok() {
		return 0
	}
	return r.outLen + len(r.data)
}

// outHeader fills the reply's fuse_out_header into b.
func (r *request) outHeader(b []byte) {
	oh := (*fuse.OutHeader)(unsafe.Pointer(&b[0]))
	oh.Unique = r.header().Unique
	oh.Status = -int32(r.status)
	oh.Length = uint32(outHeaderSize + r.replyLen())
}

// slot lets an INTERRUPT reach the goroutine serving the request it names.
// Each serving goroutine owns one; the server keeps them all in a list that
// interrupt scans (interrupts are rare: no table is updated per request).
type slot struct {
	mu     sync.Mutex
	unique uint64        // the request being served; 0 when idle
	c      chan struct{} // closed by an interrupt of unique; made lazily
	closed bool          // c was closed: the next request gets a new one
}

func (sl *slot) begin(unique uint64) {
	sl.mu.Lock()
	sl.unique = unique
	if sl.closed {
		sl.c, sl.closed = nil, false
	}
	sl.mu.Unlock()
}

func (sl *slot) end() {
	sl.mu.Lock()
	sl.unique = 0
	sl.mu.Unlock()
}

func (sl *slot) cancel() <-chan struct{} {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.c == nil {
		sl.c = make(chan struct{})
	}
	return sl.c
}

// interrupt closes the cancel channel if the slot serves unique.
func (sl *slot) interrupt(unique uint64) bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.unique != unique {
		return false
	}
	if sl.c == nil {
		sl.c = make(chan struct{})
	}
	if !sl.closed {
		close(sl.c)
		sl.closed = true
	}
	return true
}
