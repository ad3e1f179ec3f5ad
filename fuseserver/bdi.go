package fuseserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// bdiDir is where the kernel shows the backing device (bdi) of a mount
// with device number dev: FUSE names it MAJOR:MINOR of its anonymous
// device (fuse_bdi_init).
func bdiDir(dev uint64) string {
	return fmt.Sprintf("/sys/class/bdi/%d:%d", unix.Major(dev), unix.Minor(dev))
}

// tuneBDI sets the mount's readahead window and its share of the dirty
// page limit, which FUSE leaves small and which no INIT field can raise:
//
//   - read_ahead_kb: the kernel caps a FUSE mount's readahead at the
//     default bdi window (128 KiB) and INIT's max_readahead can only lower
//     it (process_init_reply takes the minimum), so a sequential reader
//     gets 128 KiB READs one after the other; a bigger window keeps
//     several 1 MiB READs in flight.
//   - max_ratio: FUSE gives each mount at most 1% of the dirty memory limit
//     and marks it BDI_CAP_STRICTLIMIT (fuse_bdi_init), so a writer is
//     throttled into small writebacks long before the global limit; a
//     bigger share lets writeback send whole 1 MiB WRITEs.
//
// Only root can write these files; anyone else keeps the kernel's values,
// and so does a failure (logged, never fatal).
func (s *Server) tuneBDI() {
	if os.Geteuid() != 0 || s.stDev == 0 {
		return
	}
	dir := bdiDir(s.stDev)
	if s.cfg.MaxReadAhead > 0 {
		s.writeBDI(dir, "read_ahead_kb", s.cfg.MaxReadAhead/1024)
	}
	if s.cfg.DirtyRatio > 0 {
		s.writeBDI(dir, "max_ratio", s.cfg.DirtyRatio)
	}
}

func (s *Server) writeBDI(dir, name string, v int) {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strconv.Itoa(v)), 0); err != nil {
		s.logger.Printf("fuseserver: setting %s to %d: %v (the kernel's value stays)", p, v, err)
	}
}
