package fuseserver

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestInStructSizes pins each opcode's in-struct size (what follows the
// header before the payload) to the kernel's struct in
// include/uapi/linux/fuse.h: a wrong size would cut names and WRITE data
// in the wrong place.
func TestInStructSizes(t *testing.T) {
	want := map[int]int{
		opLookup: 0, opForget: 8, opBatchForget: 8, opGetattr: 16, opSetattr: 88,
		opReadlink: 0, opSymlink: 0, opMknod: 16, opMkdir: 8, opUnlink: 0, opRmdir: 0,
		opRename: 8, opRename2: 16, opLink: 8, opOpen: 8, opRead: 40, opWrite: 40,
		opStatfs: 0, opRelease: 24, opFsync: 16, opSetxattr: 8, opGetxattr: 8,
		opListxattr: 8, opRemovexattr: 0, opFlush: 24, opInit: 64, opOpendir: 8,
		opReaddir: 40, opReaddirplus: 40, opReleasedir: 24, opFsyncdir: 16,
		opGetlk: 48, opSetlk: 48, opSetlkw: 48, opAccess: 8, opCreate: 16,
		opTmpfile: 16, opInterrupt: 8, opFallocate: 32, opLseek: 24,
		opCopyFileRange: 56, opCopyFileRange64: 56, opSyncfs: 8, opStatx: 24,
		opIoctl: 32,
	}
	for op, n := range want {
		h := handlers[op]
		if got := h.inSize - inHeaderSize; got != n {
			t.Errorf("%s: in-struct %d bytes, the kernel's is %d", h.name, got, n)
		}
	}
}

// TestDecodeClearsStaleArgs checks that a short in-struct (RENAME's,
// decoded as go-fuse's longer RenameIn) never shows the previous
// request's bytes: RENAME once failed with EINVAL from a stale Flags.
func TestDecodeClearsStaleArgs(t *testing.T) {
	var r request
	hdr := make([]byte, inHeaderSize)
	hdr[4] = opRename2
	arg := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}
	if _, ok := r.decode(hdr, arg, nil); !ok {
		t.Fatal("RENAME2 did not decode")
	}
	hdr[4] = opRename
	if _, ok := r.decode(hdr, arg[:8], []byte("a\x00b\x00")); !ok {
		t.Fatal("RENAME did not decode")
	}
	if in := r.inBytes(); in[inHeaderSize+8] != 0 {
		t.Fatalf("RENAME's flags read %#x from the previous request", in[inHeaderSize+8])
	}
	if a, b, ok := r.names(); !ok || a != "a" || b != "b" {
		t.Fatalf("names %q %q %v", a, b, ok)
	}
}

// ioctlFS records the IOCTL it serves and answers with Result 7 and its
// reply bytes as out-data.
type ioctlFS struct {
	fuse.RawFileSystem
	in          fuse.IoctlIn
	inData      []byte
	outLen      int
	outWasClear bool
	reply       []byte
}

func (f *ioctlFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	f.in, f.inData, f.outLen = *in, bytes.Clone(inbuf), len(outbuf)
	f.outWasClear = !bytes.ContainsFunc(outbuf, func(r rune) bool { return r != 0 })
	out.Result = 7
	copy(outbuf, f.reply)
	return fuse.OK
}

// TestIoctlDecoding: IOCTL's in-data (what follows fuse_ioctl_in) reaches
// the FileSystem whole, its out-data buffer is OutSize bytes and cleared
// (it goes back to the caller whole), and the reply is fuse_ioctl_out then
// that buffer. On io_uring the in-data lies in the buffer the out-data is
// built in: an _IOWR command's in-data must survive the clearing.
func TestIoctlDecoding(t *testing.T) {
	for _, uring := range []bool{false, true} {
		fs := &ioctlFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), reply: []byte("0123456789abcdef")}
		s := &Server{fs: fs}
		arg := []byte("in-data of 16 b.")
		var iin fuse.IoctlIn
		iin.Opcode = opIoctl
		iin.Unique = 9
		iin.Fh = 5
		iin.Cmd = 0xc0105801 // _IOWR('X', 1, 16 bytes)
		iin.InSize, iin.OutSize = uint32(len(arg)), 16
		msg := unsafe.Slice((*byte)(unsafe.Pointer(&iin)), unsafe.Sizeof(iin))
		r := request{slot: &slot{}}
		r.buf = bytes.Repeat([]byte{0xff}, 4096) // an earlier reply's data
		payload := append([]byte(nil), arg...)
		if uring {
			copy(r.buf, arg)
			payload = r.buf[:len(arg)]
		}
		h, ok := r.decode(msg[:inHeaderSize], msg[inHeaderSize:], payload)
		if !ok || !s.serve(&r, h) {
			t.Fatalf("uring %v: IOCTL did not decode or expects no reply", uring)
		}
		if !r.status.Ok() || fs.in.Fh != 5 || fs.in.Cmd != iin.Cmd || !bytes.Equal(fs.inData, arg) {
			t.Errorf("uring %v: %v, the FileSystem got fh %d cmd %#x in-data %q", uring, r.status, fs.in.Fh, fs.in.Cmd, fs.inData)
		}
		if fs.outLen != 16 || !fs.outWasClear {
			t.Errorf("uring %v: out-data buffer of %d bytes, cleared %v; want 16, cleared", uring, fs.outLen, fs.outWasClear)
		}
		ob := r.outBytes()
		if len(ob) != int(unsafe.Sizeof(fuse.IoctlOut{})) || (*fuse.IoctlOut)(unsafe.Pointer(&ob[0])).Result != 7 {
			t.Errorf("uring %v: reply struct of %d bytes (%v)", uring, len(ob), ob)
		}
		if !bytes.Equal(r.data, fs.reply) {
			t.Errorf("uring %v: out-data %q, want %q", uring, r.data, fs.reply)
		}
	}
}

// TestQuick pins the requests an io_uring queue's owner thread serves
// itself (handler.quick): what never waits for the device, for a lock held
// across device I/O, or for the kernel; and the metadata commits it serves
// when they come alone (handler.commits), which never wait for the kernel. A request added here must be
// checked against those rules; anything that writes data, syncs,
// truncates, allocates or invalidates kernel pages stays off the list.
func TestQuick(t *testing.T) {
	want := map[int]bool{
		opLookup: true, opGetattr: true, opReadlink: true, opStatfs: true, opGetxattr: true,
		opListxattr: true, opFlush: true, opOpendir: true, opReaddir: true, opReaddirplus: true,
		opReleasedir: true, opAccess: true, opLseek: true, opStatx: true,
	}
	var r request
	for op := range handlers {
		h := &handlers[op]
		switch op {
		case opSetattr, opOpen:
			continue // conditional: below
		}
		if got := h.quick != nil; got != want[op] {
			t.Errorf("%s: quick %v, want %v", h.name, got, want[op])
		}
	}
	setattr := func(valid uint32) bool {
		*in[fuse.SetAttrIn](&r) = fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: valid}}
		return handlers[opSetattr].quick(&r)
	}
	if !setattr(fuse.FATTR_MTIME|fuse.FATTR_ATIME) || !setattr(fuse.FATTR_MODE) {
		t.Error("a SETATTR of times or mode is not quick")
	}
	if setattr(fuse.FATTR_SIZE) || setattr(fuse.FATTR_SIZE|fuse.FATTR_MTIME) {
		t.Error("a truncating SETATTR is quick")
	}
	open := func(flags uint32) bool {
		*in[fuse.OpenIn](&r) = fuse.OpenIn{Flags: flags}
		return handlers[opOpen].quick(&r)
	}
	if !open(0) || !open(2) {
		t.Error("a plain OPEN is not quick")
	}
	if open(2 | 0o1000) { // O_RDWR|O_TRUNC
		t.Error("an OPEN with O_TRUNC is quick")
	}
	commits := map[int]bool{
		opSymlink: true, opMknod: true, opMkdir: true, opUnlink: true, opRmdir: true, opRename: true,
		opRename2: true, opLink: true, opCreate: true, opTmpfile: true, opSetxattr: true,
		opRemovexattr: true, opRelease: true,
	}
	for op := range handlers {
		if got := handlers[op].commits; got != commits[op] {
			t.Errorf("%s: commits %v, want %v", handlers[op].name, got, commits[op])
		}
	}
}
