package fuseserver

import (
	"bytes"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Opcodes (enum fuse_opcode in include/uapi/linux/fuse.h).
const (
	opLookup          = 1
	opForget          = 2
	opGetattr         = 3
	opSetattr         = 4
	opReadlink        = 5
	opSymlink         = 6
	opMknod           = 8
	opMkdir           = 9
	opUnlink          = 10
	opRmdir           = 11
	opRename          = 12
	opLink            = 13
	opOpen            = 14
	opRead            = 15
	opWrite           = 16
	opStatfs          = 17
	opRelease         = 18
	opFsync           = 20
	opSetxattr        = 21
	opGetxattr        = 22
	opListxattr       = 23
	opRemovexattr     = 24
	opFlush           = 25
	opInit            = 26
	opOpendir         = 27
	opReaddir         = 28
	opReleasedir      = 29
	opFsyncdir        = 30
	opGetlk           = 31
	opSetlk           = 32
	opSetlkw          = 33
	opAccess          = 34
	opCreate          = 35
	opInterrupt       = 36
	opBmap            = 37
	opDestroy         = 38
	opIoctl           = 39
	opPoll            = 40
	opNotifyReply     = 41
	opBatchForget     = 42
	opFallocate       = 43
	opReaddirplus     = 44
	opRename2         = 45
	opLseek           = 46
	opCopyFileRange   = 47
	opSetupmapping    = 48
	opRemovemapping   = 49
	opSyncfs          = 50
	opTmpfile         = 51
	opStatx           = 52
	opCopyFileRange64 = 53

	opCount = 54
)

// inHeaderSize is sizeof(struct fuse_in_header); outHeaderSize is
// sizeof(struct fuse_out_header).
const (
	inHeaderSize  = int(unsafe.Sizeof(fuse.InHeader{}))
	outHeaderSize = int(unsafe.Sizeof(fuse.OutHeader{}))
)

// maxInSize bounds every opcode's header plus in-struct (the largest is
// SETATTR's 128 bytes): request.in holds a copy of both.
const maxInSize = 256

// maxOutSize bounds every fixed-size reply struct (the largest is
// STATX's 256 bytes).
const maxOutSize = 288

// handler is how one opcode is served.
type handler struct {
	name string
	// inSize is the size of go-fuse's in type for the opcode, which
	// embeds the header: the header plus the kernel's in-struct
	// (in_args[0]). What follows it (names, WRITE data) is the payload.
	inSize int
	// outSize is the size of the fixed reply struct (0: none, or data
	// only).
	outSize int
	// serve answers the request; nil means ENOSYS.
	serve func(s *Server, r *request)
	// noReply: the kernel expects no answer (FORGET, BATCH_FORGET).
	noReply bool
	// quick, when set, reports whether the decoded request may be served
	// on an io_uring queue's owner thread, which receives the queue's
	// next requests only once it returns: what reads or updates in-core
	// state (or the engine's metadata) and never waits for the device,
	// for a lock held across device I/O, or for the kernel (IOCTL's
	// exchange invalidates pages, and a page may be locked by a request
	// queued behind this one). Nil: never (TestQuick pins the set).
	quick func(r *request) bool
	// commits: a metadata commit (a namespace change, an xattr change, a
	// RELEASE), served on the owner thread too when it arrives alone and
	// nothing of its queue is being served elsewhere, where handing it off
	// and waking the owner back would cost more than the commit. It may
	// wait for engine locks and the metadata store, never for the kernel.
	commits bool
}

// always is handler.quick for opcodes that are always quick.
func always(*request) bool { return true }

var handlers [opCount]handler

func sizeOf[T any]() int {
	var v T
	return int(unsafe.Sizeof(v))
}

func init() {
	hdr := inHeaderSize
	set := func(op int, name string, inSize, outSize int, serve func(*Server, *request)) {
		handlers[op] = handler{name: name, inSize: inSize, outSize: outSize, serve: serve}
	}
	set(opLookup, "LOOKUP", hdr, sizeOf[fuse.EntryOut](), doLookup)
	set(opForget, "FORGET", sizeOf[fuse.ForgetIn](), 0, doForget)
	set(opBatchForget, "BATCH_FORGET", hdr+8, 0, doBatchForget)
	handlers[opForget].noReply = true
	handlers[opBatchForget].noReply = true
	set(opGetattr, "GETATTR", sizeOf[fuse.GetAttrIn](), sizeOf[fuse.AttrOut](), doGetattr)
	set(opSetattr, "SETATTR", sizeOf[fuse.SetAttrIn](), sizeOf[fuse.AttrOut](), doSetattr)
	set(opReadlink, "READLINK", hdr, 0, doReadlink)
	set(opSymlink, "SYMLINK", hdr, sizeOf[fuse.EntryOut](), doSymlink)
	set(opMknod, "MKNOD", sizeOf[fuse.MknodIn](), sizeOf[fuse.EntryOut](), doMknod)
	set(opMkdir, "MKDIR", sizeOf[fuse.MkdirIn](), sizeOf[fuse.EntryOut](), doMkdir)
	set(opUnlink, "UNLINK", hdr, 0, doUnlink)
	set(opRmdir, "RMDIR", hdr, 0, doRmdir)
	// RENAME's in-struct is only fuse_rename_in's newdir; RENAME2 adds
	// flags. Both decode into go-fuse's RenameIn (Flags zero for RENAME).
	set(opRename, "RENAME", hdr+8, 0, doRename)
	set(opRename2, "RENAME2", sizeOf[fuse.RenameIn](), 0, doRename)
	set(opLink, "LINK", sizeOf[fuse.LinkIn](), sizeOf[fuse.EntryOut](), doLink)
	set(opOpen, "OPEN", sizeOf[fuse.OpenIn](), sizeOf[fuse.OpenOut](), doOpen)
	set(opRead, "READ", sizeOf[fuse.ReadIn](), 0, doRead)
	set(opWrite, "WRITE", sizeOf[fuse.WriteIn](), sizeOf[fuse.WriteOut](), doWrite)
	set(opStatfs, "STATFS", hdr, sizeOf[fuse.StatfsOut](), doStatfs)
	set(opRelease, "RELEASE", sizeOf[fuse.ReleaseIn](), 0, doRelease)
	set(opFsync, "FSYNC", sizeOf[fuse.FsyncIn](), 0, doFsync)
	// SETXATTR's in-struct is 8 bytes unless SETXATTR_EXT was negotiated
	// (sluice does not ask for it); the rest of go-fuse's SetXAttrIn is
	// zero.
	set(opSetxattr, "SETXATTR", hdr+8, 0, doSetxattr)
	set(opGetxattr, "GETXATTR", sizeOf[fuse.GetXAttrIn](), sizeOf[fuse.GetXAttrOut](), doGetxattr)
	set(opListxattr, "LISTXATTR", sizeOf[fuse.GetXAttrIn](), sizeOf[fuse.GetXAttrOut](), doListxattr)
	set(opRemovexattr, "REMOVEXATTR", hdr, 0, doRemovexattr)
	set(opFlush, "FLUSH", sizeOf[fuse.FlushIn](), 0, doFlush)
	set(opInit, "INIT", sizeOf[fuse.InitIn](), sizeOf[fuse.InitOut](), nil) // answered by the transport
	set(opOpendir, "OPENDIR", sizeOf[fuse.OpenIn](), sizeOf[fuse.OpenOut](), doOpendir)
	set(opReaddir, "READDIR", sizeOf[fuse.ReadIn](), 0, doReaddir)
	set(opReaddirplus, "READDIRPLUS", sizeOf[fuse.ReadIn](), 0, doReaddirplus)
	set(opReleasedir, "RELEASEDIR", sizeOf[fuse.ReleaseIn](), 0, doReleasedir)
	set(opFsyncdir, "FSYNCDIR", sizeOf[fuse.FsyncIn](), 0, doFsyncdir)
	set(opGetlk, "GETLK", sizeOf[fuse.LkIn](), sizeOf[fuse.LkOut](), doGetlk)
	set(opSetlk, "SETLK", sizeOf[fuse.LkIn](), 0, doSetlk)
	set(opSetlkw, "SETLKW", sizeOf[fuse.LkIn](), 0, doSetlkw)
	set(opAccess, "ACCESS", sizeOf[fuse.AccessIn](), 0, doAccess)
	set(opCreate, "CREATE", sizeOf[fuse.CreateIn](), sizeOf[fuse.CreateOut](), doCreate)
	set(opTmpfile, "TMPFILE", sizeOf[fuse.CreateIn](), sizeOf[fuse.CreateOut](), doTmpfile)
	set(opInterrupt, "INTERRUPT", sizeOf[fuse.InterruptIn](), 0, doInterrupt)
	set(opBmap, "BMAP", hdr+16, 0, nil)
	set(opDestroy, "DESTROY", hdr, 0, doDestroy)
	set(opIoctl, "IOCTL", sizeOf[fuse.IoctlIn](), sizeOf[fuse.IoctlOut](), doIoctl)
	set(opPoll, "POLL", hdr+24, 0, nil)
	set(opNotifyReply, "NOTIFY_REPLY", hdr+24, 0, nil)
	handlers[opNotifyReply].noReply = true
	set(opFallocate, "FALLOCATE", sizeOf[fuse.FallocateIn](), 0, doFallocate)
	set(opLseek, "LSEEK", sizeOf[fuse.LseekIn](), sizeOf[fuse.LseekOut](), doLseek)
	set(opCopyFileRange, "COPY_FILE_RANGE", sizeOf[fuse.CopyFileRangeIn](), sizeOf[fuse.WriteOut](), doCopyFileRange)
	set(opCopyFileRange64, "COPY_FILE_RANGE_64", sizeOf[fuse.CopyFileRangeIn](), sizeOf[fuse.CopyFileRangeOut](), doCopyFileRange)
	set(opSetupmapping, "SETUPMAPPING", hdr+40, 0, nil)
	set(opRemovemapping, "REMOVEMAPPING", hdr+8, 0, nil)
	set(opSyncfs, "SYNCFS", hdr+8, 0, doSyncfs)
	set(opStatx, "STATX", sizeOf[fuse.StatxIn](), sizeOf[fuse.StatxOut](), doStatx)
	for _, op := range []int{opLookup, opGetattr, opReadlink, opStatfs, opGetxattr, opListxattr,
		opFlush, opOpendir, opReaddir, opReaddirplus, opReleasedir, opAccess, opLseek, opStatx} {
		handlers[op].quick = always
	}
	for _, op := range []int{opSymlink, opMknod, opMkdir, opUnlink, opRmdir, opRename, opRename2,
		opLink, opCreate, opTmpfile, opSetxattr, opRemovexattr, opRelease} {
		handlers[op].commits = true
	}
	// A SETATTR that changes the size truncates (device I/O, zeroing);
	// an OPEN with O_TRUNC too.
	handlers[opSetattr].quick = func(r *request) bool { return in[fuse.SetAttrIn](r).Valid&fuse.FATTR_SIZE == 0 }
	handlers[opOpen].quick = func(r *request) bool { return in[fuse.OpenIn](r).Flags&syscall.O_TRUNC == 0 }
	for op := range handlers {
		if handlers[op].inSize > maxInSize || handlers[op].outSize > maxOutSize {
			panic("fuseserver: request buffers too small for " + handlers[op].name)
		}
	}
}

// opName names an opcode for logs and metrics.
func opName(op uint32) string {
	if op < opCount && handlers[op].name != "" {
		return handlers[op].name
	}
	return "OPCODE-" + strconv.FormatUint(uint64(op), 10)
}

// in returns the request's header and in-struct as go-fuse's type T,
// which embeds fuse.InHeader.
func in[T any](r *request) *T { return (*T)(unsafe.Pointer(&r.in[0])) }

// out returns the reply's fixed struct as T.
func out[T any](r *request) *T { return (*T)(unsafe.Pointer(&r.out[0])) }

// name returns the first NUL-terminated name of the payload.
func (r *request) name() string {
	p := r.payload
	if i := bytes.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	return string(p)
}

// names returns the two NUL-terminated names of the payload (RENAME,
// SYMLINK).
func (r *request) names() (string, string, bool) {
	i := bytes.IndexByte(r.payload, 0)
	if i < 0 {
		return "", "", false
	}
	rest := r.payload[i+1:]
	j := bytes.IndexByte(rest, 0)
	if j < 0 {
		return "", "", false
	}
	return string(r.payload[:i]), string(rest[:j]), true
}

func doLookup(s *Server, r *request) {
	r.status = s.fs.Lookup(r.cancel(), r.header(), r.name(), out[fuse.EntryOut](r))
}

func doForget(s *Server, r *request) {
	s.fs.Forget(r.header().NodeId, in[fuse.ForgetIn](r).Nlookup)
}

// forgetOne is struct fuse_forget_one.
type forgetOne struct{ nodeID, nlookup uint64 }

func doBatchForget(s *Server, r *request) {
	n := len(r.payload) / int(unsafe.Sizeof(forgetOne{}))
	if count := int(*(*uint32)(unsafe.Pointer(&r.inBytes()[inHeaderSize]))); count < n {
		n = count
	}
	if n == 0 {
		return
	}
	for _, f := range unsafe.Slice((*forgetOne)(unsafe.Pointer(&r.payload[0])), n) {
		s.fs.Forget(f.nodeID, f.nlookup)
	}
}

func doGetattr(s *Server, r *request) {
	r.status = s.fs.GetAttr(r.cancel(), in[fuse.GetAttrIn](r), out[fuse.AttrOut](r))
}

func doSetattr(s *Server, r *request) {
	r.status = s.fs.SetAttr(r.cancel(), in[fuse.SetAttrIn](r), out[fuse.AttrOut](r))
}

func doReadlink(s *Server, r *request) {
	target, st := s.fs.Readlink(r.cancel(), r.header())
	r.status = st
	if st.Ok() {
		r.replyData(target)
	}
}

func doSymlink(s *Server, r *request) {
	name, target, ok := r.names()
	if !ok {
		r.status = fuse.EIO
		return
	}
	r.status = s.fs.Symlink(r.cancel(), r.header(), target, name, out[fuse.EntryOut](r))
}

func doMknod(s *Server, r *request) {
	r.status = s.fs.Mknod(r.cancel(), in[fuse.MknodIn](r), r.name(), out[fuse.EntryOut](r))
}

func doMkdir(s *Server, r *request) {
	r.status = s.fs.Mkdir(r.cancel(), in[fuse.MkdirIn](r), r.name(), out[fuse.EntryOut](r))
}

func doUnlink(s *Server, r *request) {
	r.status = s.fs.Unlink(r.cancel(), r.header(), r.name())
}

func doRmdir(s *Server, r *request) {
	r.status = s.fs.Rmdir(r.cancel(), r.header(), r.name())
}

func doRename(s *Server, r *request) {
	oldName, newName, ok := r.names()
	if !ok {
		r.status = fuse.EIO
		return
	}
	r.status = s.fs.Rename(r.cancel(), in[fuse.RenameIn](r), oldName, newName)
}

func doLink(s *Server, r *request) {
	r.status = s.fs.Link(r.cancel(), in[fuse.LinkIn](r), r.name(), out[fuse.EntryOut](r))
}

func doOpen(s *Server, r *request) {
	r.status = s.fs.Open(r.cancel(), in[fuse.OpenIn](r), out[fuse.OpenOut](r))
}

func doCreate(s *Server, r *request) {
	r.status = s.fs.Create(r.cancel(), in[fuse.CreateIn](r), r.name(), out[fuse.CreateOut](r))
}

func doTmpfile(s *Server, r *request) {
	r.status = s.fs.Tmpfile(r.cancel(), in[fuse.CreateIn](r), out[fuse.CreateOut](r))
}

func doOpendir(s *Server, r *request) {
	r.status = s.fs.OpenDir(r.cancel(), in[fuse.OpenIn](r), out[fuse.OpenOut](r))
}

// doRead reads into the transport's reply buffer: on io_uring that is the
// ring entry's payload, so the data lands where the kernel takes it from.
func doRead(s *Server, r *request) {
	rin := in[fuse.ReadIn](r)
	buf := r.dataBuf(int(rin.Size))
	res, st := s.fs.Read(r.cancel(), rin, buf)
	r.status = st
	if !st.Ok() || res == nil {
		return
	}
	data, st := res.Bytes(buf)
	res.Done()
	if r.status = st; st.Ok() {
		r.replyData(data)
	}
}

func doWrite(s *Server, r *request) {
	n, st := s.fs.Write(r.cancel(), in[fuse.WriteIn](r), r.payload)
	out[fuse.WriteOut](r).Size = n
	r.status = st
}

func doStatfs(s *Server, r *request) {
	r.status = s.fs.StatFs(r.cancel(), r.header(), out[fuse.StatfsOut](r))
}

func doRelease(s *Server, r *request) { s.fs.Release(r.cancel(), in[fuse.ReleaseIn](r)) }

func doReleasedir(s *Server, r *request) { s.fs.ReleaseDir(in[fuse.ReleaseIn](r)) }

func doFsync(s *Server, r *request) {
	r.status = s.fs.Fsync(r.cancel(), in[fuse.FsyncIn](r))
}

func doFsyncdir(s *Server, r *request) {
	r.status = s.fs.FsyncDir(r.cancel(), in[fuse.FsyncIn](r))
}

func doFlush(s *Server, r *request) {
	r.status = s.fs.Flush(r.cancel(), in[fuse.FlushIn](r))
}

func doSetxattr(s *Server, r *request) {
	i := bytes.IndexByte(r.payload, 0)
	if i < 0 {
		r.status = fuse.EINVAL
		return
	}
	sin := in[fuse.SetXAttrIn](r)
	value := r.payload[i+1:]
	if int(sin.Size) < len(value) {
		value = value[:sin.Size]
	}
	r.status = s.fs.SetXAttr(r.cancel(), sin, string(r.payload[:i]), value)
}

// xattrReply finishes GETXATTR and LISTXATTR, which are two calls each:
// with size 0 the caller asks for the size (a GetXAttrOut and no data),
// otherwise for the data (no struct).
func xattrReply(r *request, size uint32, n uint32, st fuse.Status, dest []byte) {
	if size == 0 {
		if st == fuse.ERANGE {
			st = fuse.OK
		}
		r.status = st
		out[fuse.GetXAttrOut](r).Size = n
		return
	}
	r.status = st
	r.outLen = 0
	if st.Ok() {
		r.replyData(dest[:n])
	}
}

func doGetxattr(s *Server, r *request) {
	gin := in[fuse.GetXAttrIn](r)
	dest := r.dataBuf(int(gin.Size))
	n, st := s.fs.GetXAttr(r.cancel(), r.header(), r.name(), dest)
	xattrReply(r, gin.Size, n, st, dest)
}

func doListxattr(s *Server, r *request) {
	gin := in[fuse.GetXAttrIn](r)
	dest := r.dataBuf(int(gin.Size))
	n, st := s.fs.ListXAttr(r.cancel(), r.header(), dest)
	xattrReply(r, gin.Size, n, st, dest)
}

func doRemovexattr(s *Server, r *request) {
	r.status = s.fs.RemoveXAttr(r.cancel(), r.header(), r.name())
}

func doReaddir(s *Server, r *request) {
	rin := in[fuse.ReadIn](r)
	list := fuse.NewDirEntryList(r.dataBuf(int(rin.Size)), rin.Offset)
	r.status = s.fs.ReadDir(r.cancel(), rin, list)
	if r.status.Ok() {
		r.replyData(list.Bytes())
	}
}

func doReaddirplus(s *Server, r *request) {
	rin := in[fuse.ReadIn](r)
	list := fuse.NewDirEntryList(r.dataBuf(int(rin.Size)), rin.Offset)
	r.status = s.fs.ReadDirPlus(r.cancel(), rin, list)
	if r.status.Ok() {
		r.replyData(list.Bytes())
	}
}

func doGetlk(s *Server, r *request) {
	r.status = s.fs.GetLk(r.cancel(), in[fuse.LkIn](r), out[fuse.LkOut](r))
}

func doSetlk(s *Server, r *request) {
	r.status = s.fs.SetLk(r.cancel(), in[fuse.LkIn](r))
}

func doSetlkw(s *Server, r *request) {
	r.status = s.fs.SetLkw(r.cancel(), in[fuse.LkIn](r))
}

func doAccess(s *Server, r *request) {
	r.status = s.fs.Access(r.cancel(), in[fuse.AccessIn](r))
}

func doInterrupt(s *Server, r *request) {
	r.status = s.interrupt(in[fuse.InterruptIn](r).Unique)
}

func doDestroy(s *Server, r *request) { r.status = fuse.OK }

func doFallocate(s *Server, r *request) {
	r.status = s.fs.Fallocate(r.cancel(), in[fuse.FallocateIn](r))
}

func doLseek(s *Server, r *request) {
	r.status = s.fs.Lseek(r.cancel(), in[fuse.LseekIn](r), out[fuse.LseekOut](r))
}

// maxCopy bounds one COPY_FILE_RANGE request so that its count fits the
// 32-bit reply of the original opcode; copy_file_range(2) may copy less
// than asked, and callers loop.
const maxCopy = 1 << 30

// doCopyFileRange answers COPY_FILE_RANGE (a 32-bit count) and
// COPY_FILE_RANGE_64 (a 64-bit count).
func doCopyFileRange(s *Server, r *request) {
	cin := in[fuse.CopyFileRangeIn](r)
	if cin.Len > maxCopy {
		cin.Len = maxCopy
	}
	n, st := s.fs.CopyFileRange(r.cancel(), cin)
	r.status = st
	if r.header().Opcode == opCopyFileRange64 {
		out[fuse.CopyFileRangeOut](r).BytesCopied = uint64(n)
	} else {
		out[fuse.WriteOut](r).Size = n
	}
}

// doIoctl answers IOCTL. A FUSE file system gets only restricted ioctls
// (fuse_file_ioctl and fuse_dir_ioctl call fuse_do_ioctl without
// FUSE_IOCTL_UNRESTRICTED, which is CUSE's), whose data the kernel moves
// as the command's _IOC_DIR and _IOC_SIZE say: for an _IOW command it has
// copied InSize bytes from the caller, which follow the in-struct; for an
// _IOR command it copies back the data that follows fuse_ioctl_out in the
// reply, at most OutSize bytes (more is EIO), and a RETRY is EIO. No INIT
// flag is needed for regular files; directories need protocol 7.18, and
// their ioctls carry FUSE_IOCTL_DIR. A 32-bit caller's carry
// FUSE_IOCTL_COMPAT and FUSE_IOCTL_32BIT. The kernel turns ENOSYS into
// ENOTTY (fuse_send_ioctl), so an unknown command may be answered either.
//
// The out-data is cleared before the call, as it goes back to the caller
// whole: it is built in the reader's reply area or the ring entry's
// payload, which hold an earlier request's data. On io_uring the in-data
// lies in that same payload buffer, so an _IOWR command's in-data is
// copied out first (ioctls are rare; this is the one allocation).
func doIoctl(s *Server, r *request) {
	iin := in[fuse.IoctlIn](r)
	inData := r.payload[:min(len(r.payload), int(iin.InSize))]
	if iin.OutSize > 0 && len(inData) > 0 {
		inData = bytes.Clone(inData)
	}
	outData := r.dataBuf(int(iin.OutSize))
	clear(outData)
	r.status = s.fs.Ioctl(r.cancel(), iin, inData, out[fuse.IoctlOut](r), outData)
	if r.status.Ok() {
		r.replyData(outData)
	}
}

func doSyncfs(s *Server, r *request) {
	sf, ok := s.fs.(SyncFSer)
	if !ok {
		r.status = fuse.ENOSYS
		return
	}
	r.status = sf.SyncFS(r.cancel(), r.header())
}

func doStatx(s *Server, r *request) {
	r.status = s.fs.Statx(r.cancel(), in[fuse.StatxIn](r), out[fuse.StatxOut](r))
}
