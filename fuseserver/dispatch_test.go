package fuseserver

import "testing"

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
