package fuseserver

import (
	"fmt"
	"os"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// INIT flags (include/uapi/linux/fuse.h) that go-fuse does not name.
const (
	capOverIOURing = uint64(1) << 41 // FUSE_OVER_IO_URING (7.42)
	capInitExt     = uint64(1) << 30 // FUSE_INIT_EXT: flags2 holds bits 32-63
)

// baseCapabilities are the INIT flags every sluice mount asks for; the
// table in doc.go says why each is there. Keep the two equal
// (TestInitFlagsDocumented).
const baseCapabilities = fuse.CAP_ASYNC_READ | fuse.CAP_BIG_WRITES | fuse.CAP_FILE_OPS |
	fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_AUTO_INVAL_DATA | fuse.CAP_READDIRPLUS |
	fuse.CAP_PARALLEL_DIROPS | fuse.CAP_MAX_PAGES | capInitExt

// Protocol versions: sluice speaks 7.x for x up to ourMinor and needs the
// kernel to speak at least minMinor (7.31 is Linux 5.4: MAX_PAGES,
// CACHE_SYMLINKS, KILLPRIV).
const (
	kernelMajor = 7
	minMinor    = 31
	ourMinor    = 45
)

// negotiated is the outcome of INIT.
type negotiated struct {
	minor    uint32 // the protocol minor both speak
	flags    uint64 // the INIT flags granted (what both sides asked for)
	maxWrite int
	maxPages int
}

// initReply answers INIT: it grants every wanted flag the kernel offers
// (io_uring only if offerURing) and fills out, returning what was agreed.
func (s *Server) initReply(in *fuse.InitIn, out *fuse.InitOut, offerURing bool) (negotiated, error) {
	if in.Major != kernelMajor {
		return negotiated{}, fmt.Errorf("kernel speaks FUSE %d.%d, sluice speaks %d.x", in.Major, in.Minor, kernelMajor)
	}
	if in.Minor < minMinor {
		return negotiated{}, fmt.Errorf("kernel speaks FUSE 7.%d, sluice needs 7.%d (Linux 5.4) or later", in.Minor, minMinor)
	}
	offered := uint64(in.Flags)
	if offered&capInitExt != 0 {
		offered |= uint64(in.Flags2) << 32
	}
	want := baseCapabilities | s.cfg.Capabilities
	if offerURing {
		want |= capOverIOURing
	}
	granted := want & offered
	minor := min(in.Minor, ourMinor)
	pageSize := os.Getpagesize()
	maxPages := (s.cfg.MaxWrite + pageSize - 1) / pageSize
	*out = fuse.InitOut{
		Major:               kernelMajor,
		Minor:               minor,
		MaxReadAhead:        in.MaxReadAhead,
		Flags:               uint32(granted),
		Flags2:              uint32(granted >> 32),
		MaxBackground:       uint16(s.cfg.MaxBackground),
		CongestionThreshold: uint16(s.cfg.MaxBackground * 3 / 4),
		MaxWrite:            uint32(s.cfg.MaxWrite),
		TimeGran:            1,
		MaxPages:            uint16(maxPages),
	}
	if s.cfg.MaxReadAhead > 0 && uint32(s.cfg.MaxReadAhead) < out.MaxReadAhead {
		out.MaxReadAhead = uint32(s.cfg.MaxReadAhead)
	}
	// A bigger window is set through the bdi after this reply (tuneBDI).
	return negotiated{minor: minor, flags: granted, maxWrite: s.cfg.MaxWrite, maxPages: maxPages}, nil
}
