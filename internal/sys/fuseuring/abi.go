package fuseuring

import "unsafe"

// The FUSE-over-io_uring ABI, from include/uapi/linux/fuse.h (protocol 7.42
// and later). Names follow the header with Go spelling.

// Commands, in the cmd_op of an IORING_OP_URING_CMD SQE on /dev/fuse
// (enum fuse_uring_cmd).
const (
	// cmdRegister (FUSE_IO_URING_CMD_REGISTER) registers one ring entry:
	// sqe->addr is an array of two iovecs {header, payload}, sqe->len 2.
	// It completes when the first request arrives in the entry.
	cmdRegister uint32 = 1
	// cmdCommitAndFetch (FUSE_IO_URING_CMD_COMMIT_AND_FETCH) hands back the
	// reply in the entry and re-arms it; it completes when the next request
	// arrives in the entry.
	cmdCommitAndFetch uint32 = 2
)

// Sizes of the areas of struct fuse_uring_req_header.
const (
	// InOutSize is FUSE_URING_IN_OUT_HEADER_SZ: the area that holds the
	// fuse_in_header on arrival and the fuse_out_header on commit.
	InOutSize = 128
	// OpInSize is FUSE_URING_OP_IN_OUT_SZ: the area that holds a request's
	// first in-argument (the per-opcode struct).
	OpInSize = 128
	// reqHeaderSize is sizeof(struct fuse_uring_req_header).
	reqHeaderSize = InOutSize + OpInSize + entInOutSize
	entInOutSize  = 32
	cmdReqSize    = 24
)

// FUSE protocol constants this package relies on.
const (
	// FlagOverIOURing is FUSE_OVER_IO_URING in the 64-bit INIT flags
	// (bit 9 of fuse_init_out.flags2; FUSE_INIT_EXT must be set too). The
	// kernel offers it in fuse_init_in when enable_uring is on; a server
	// that answers with it may register ring entries.
	FlagOverIOURing uint64 = 1 << 41
	// MinReadBuffer is FUSE_MIN_READ_BUFFER, the least payload the kernel
	// ever requires.
	MinReadBuffer = 8192
)

// entInOut is struct fuse_uring_ent_in_out, the last 32 bytes of the
// header. The kernel writes it when a request arrives; the server writes
// PayloadSz before a commit.
type entInOut struct {
	Flags uint64
	// CommitID is the request's unique, to be echoed in cmdReq.CommitID.
	CommitID uint64
	// PayloadSz is the number of payload bytes in either direction.
	PayloadSz uint32
	Padding   uint32
	Reserved  uint64
}

// reqHeader is struct fuse_uring_req_header, iov[0] of a REGISTER.
type reqHeader struct {
	InOut    [InOutSize]byte
	OpIn     [OpInSize]byte
	EntInOut entInOut
}

// cmdReq is struct fuse_uring_cmd_req, written at the start of the 80-byte
// command area of the SQE.
type cmdReq struct {
	Flags    uint64
	CommitID uint64
	QID      uint16
	_        [6]byte
}

var (
	_ [reqHeaderSize - unsafe.Sizeof(reqHeader{})]byte
	_ [unsafe.Sizeof(reqHeader{}) - reqHeaderSize]byte
	_ [entInOutSize - unsafe.Sizeof(entInOut{})]byte
	_ [unsafe.Sizeof(entInOut{}) - entInOutSize]byte
	_ [cmdReqSize - unsafe.Sizeof(cmdReq{})]byte
	_ [unsafe.Sizeof(cmdReq{}) - cmdReqSize]byte
)

// MaxPayload returns the payload size the kernel requires of every ring
// entry for a connection whose INIT reply said maxWrite and maxPages:
// max(FUSE_MIN_READ_BUFFER, max_write, max_pages*PAGE_SIZE), as computed
// by fuse_uring_create. maxPages is the value the kernel uses: the reply's
// max_pages when FUSE_MAX_PAGES was set, else its default of 32 pages.
func MaxPayload(maxWrite uint32, maxPages uint16, pageSize int) int {
	n := max(MinReadBuffer, int(maxWrite))
	return max(n, int(maxPages)*pageSize)
}
