package fuseserver

import (
	"math/bits"
	"os"
	"regexp"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// initFlagNames names the INIT flags by go-fuse's names (the kernel's are
// FUSE_ for CAP_, with FUSE_DO_READDIRPLUS for CAP_READDIRPLUS).
var initFlagNames = map[uint64]string{
	fuse.CAP_ASYNC_READ:           "CAP_ASYNC_READ",
	fuse.CAP_POSIX_LOCKS:          "CAP_POSIX_LOCKS",
	fuse.CAP_FILE_OPS:             "CAP_FILE_OPS",
	fuse.CAP_ATOMIC_O_TRUNC:       "CAP_ATOMIC_O_TRUNC",
	fuse.CAP_EXPORT_SUPPORT:       "CAP_EXPORT_SUPPORT",
	fuse.CAP_BIG_WRITES:           "CAP_BIG_WRITES",
	fuse.CAP_DONT_MASK:            "CAP_DONT_MASK",
	fuse.CAP_SPLICE_WRITE:         "CAP_SPLICE_WRITE",
	fuse.CAP_SPLICE_MOVE:          "CAP_SPLICE_MOVE",
	fuse.CAP_SPLICE_READ:          "CAP_SPLICE_READ",
	fuse.CAP_FLOCK_LOCKS:          "CAP_FLOCK_LOCKS",
	fuse.CAP_IOCTL_DIR:            "CAP_IOCTL_DIR",
	fuse.CAP_AUTO_INVAL_DATA:      "CAP_AUTO_INVAL_DATA",
	fuse.CAP_READDIRPLUS:          "CAP_READDIRPLUS",
	fuse.CAP_READDIRPLUS_AUTO:     "CAP_READDIRPLUS_AUTO",
	fuse.CAP_ASYNC_DIO:            "CAP_ASYNC_DIO",
	fuse.CAP_WRITEBACK_CACHE:      "CAP_WRITEBACK_CACHE",
	fuse.CAP_NO_OPEN_SUPPORT:      "CAP_NO_OPEN_SUPPORT",
	fuse.CAP_PARALLEL_DIROPS:      "CAP_PARALLEL_DIROPS",
	fuse.CAP_HANDLE_KILLPRIV:      "CAP_HANDLE_KILLPRIV",
	fuse.CAP_POSIX_ACL:            "CAP_POSIX_ACL",
	fuse.CAP_ABORT_ERROR:          "CAP_ABORT_ERROR",
	fuse.CAP_MAX_PAGES:            "CAP_MAX_PAGES",
	fuse.CAP_CACHE_SYMLINKS:       "CAP_CACHE_SYMLINKS",
	fuse.CAP_NO_OPENDIR_SUPPORT:   "CAP_NO_OPENDIR_SUPPORT",
	fuse.CAP_EXPLICIT_INVAL_DATA:  "CAP_EXPLICIT_INVAL_DATA",
	fuse.CAP_MAP_ALIGNMENT:        "CAP_MAP_ALIGNMENT",
	fuse.CAP_SUBMOUNTS:            "CAP_SUBMOUNTS",
	fuse.CAP_HANDLE_KILLPRIV_V2:   "CAP_HANDLE_KILLPRIV_V2",
	fuse.CAP_SETXATTR_EXT:         "CAP_SETXATTR_EXT",
	fuse.CAP_INIT_EXT:             "CAP_INIT_EXT",
	fuse.CAP_SECURITY_CTX:         "CAP_SECURITY_CTX",
	fuse.CAP_HAS_INODE_DAX:        "CAP_HAS_INODE_DAX",
	fuse.CAP_CREATE_SUPP_GROUP:    "CAP_CREATE_SUPP_GROUP",
	fuse.CAP_HAS_EXPIRE_ONLY:      "CAP_HAS_EXPIRE_ONLY",
	fuse.CAP_DIRECT_IO_ALLOW_MMAP: "CAP_DIRECT_IO_ALLOW_MMAP",
	fuse.CAP_PASSTHROUGH:          "CAP_PASSTHROUGH",
	fuse.CAP_NO_EXPORT_SUPPORT:    "CAP_NO_EXPORT_SUPPORT",
	fuse.CAP_HAS_RESEND:           "CAP_HAS_RESEND",
	fuse.CAP_ALLOW_IDMAP:          "CAP_ALLOW_IDMAP",
	fuse.CAP_OVER_IO_URING:        "CAP_OVER_IO_URING",
	fuse.CAP_REQUEST_TIMEOUT:      "CAP_REQUEST_TIMEOUT",
}

// docFlagRow is one row of doc.go's INIT flag table: "//\tCAP_NAME  asked  why".
var docFlagRow = regexp.MustCompile(`(?m)^//\t(CAP_[A-Z0-9_]+)\s+(\S+)\s`)

// TestInitFlagsDocumented checks doc.go's INIT flag table against the code:
// the rows marked base are exactly baseCapabilities, FUSE_OVER_IO_URING is
// marked io_uring, and every row names a real flag once.
func TestInitFlagsDocumented(t *testing.T) {
	if capOverIOURing != fuse.CAP_OVER_IO_URING || capInitExt != fuse.CAP_INIT_EXT {
		t.Fatalf("capOverIOURing %#x, capInitExt %#x: not go-fuse's values", capOverIOURing, capInitExt)
	}
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	byName := make(map[string]uint64, len(initFlagNames))
	for bit, name := range initFlagNames {
		byName[name] = bit
	}
	asked := make(map[string]string)
	for _, m := range docFlagRow.FindAllStringSubmatch(string(src), -1) {
		name, how := m[1], m[2]
		if _, ok := byName[name]; !ok {
			t.Errorf("doc.go's table names %s, which is not an INIT flag", name)
		}
		if prev, ok := asked[name]; ok {
			t.Errorf("doc.go's table has %s twice (%s, %s)", name, prev, how)
		}
		switch how {
		case "base", "io_uring", "fusefs", "writeback", "no":
		default:
			t.Errorf("doc.go's table: %s is asked %q; want base, io_uring, fusefs, writeback or no", name, how)
		}
		asked[name] = how
	}
	if len(asked) == 0 {
		t.Fatal("no INIT flag table found in doc.go")
	}

	want := map[uint64]string{capOverIOURing: "io_uring"}
	for b := uint64(baseCapabilities); b != 0; b &= b - 1 {
		want[uint64(1)<<bits.TrailingZeros64(b)] = "base"
	}
	for bit, how := range want {
		name, ok := initFlagNames[bit]
		if !ok {
			t.Errorf("INIT flag bit %d is asked for but has no name here: add it to initFlagNames and doc.go", bits.TrailingZeros64(bit))
			continue
		}
		if got, ok := asked[name]; !ok {
			t.Errorf("%s is asked for (%s) but missing from doc.go's table", name, how)
		} else if got != how {
			t.Errorf("%s is asked for as %s, doc.go's table says %s", name, how, got)
		}
	}
	for name, how := range asked {
		if how == "base" && uint64(baseCapabilities)&byName[name] == 0 {
			t.Errorf("doc.go's table marks %s base, but baseCapabilities lacks it", name)
		}
	}
}
