// Package mountinfo reads /proc/self/mountinfo (proc_pid_mountinfo(5)):
// the mounts this process sees, with their per-mount and per-superblock
// options.
//
// One line per mount:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8)  (9)     (10)        (11)
//
// (1) mount ID, (2) parent ID, (3) major:minor of st_dev, (4) root of the
// mount within its file system, (5) mount point, (6) per-mount options,
// (7) zero or more optional fields, (8) a separator, (9) file system type,
// (10) source, (11) per-superblock options. Paths and the source escape
// space, tab, newline and backslash as three octal digits (\040).
//
// The kernel lists mounts in the order they were attached, so of two
// mounts on one point the later is on top. fusefs uses this package to
// find a sluice mount on a directory and to check the options a mount got;
// bench uses it to describe the file system holding a path.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Path is where a process reads the mounts it sees.
const Path = "/proc/self/mountinfo"

// Mount is one line of mountinfo.
type Mount struct {
	ID       int // unique mount ID (may be reused after unmount)
	ParentID int // the mount this one is attached to (itself for the root of the tree)
	// Major and Minor are the device number that stat(2) reports as
	// st_dev for files on the mount (0:N for FUSE, tmpfs and other
	// file systems without a block device).
	Major, Minor uint32
	Root         string // the directory of the file system mounted here; "/" unless a bind mount
	Point        string // mount point, unescaped, absolute
	// Options are the per-mount options: "rw" or "ro", nosuid, nodev,
	// noexec, and the atime options (noatime, relatime, ...).
	Options string
	// Optional are the optional fields ("shared:1", "master:2", ...).
	Optional []string
	FSType   string // file system type: "ext4", "fuse.sluice"
	Source   string // unescaped; for sluice the volume directory; "none" when there is none
	// SuperOptions are the per-superblock options, which the file system
	// reports: for FUSE, "rw,user_id=0,group_id=0,default_permissions,allow_other".
	SuperOptions string
}

// HasOption reports whether name is among the per-mount or the
// per-superblock options. An option with a value matches by its name
// ("user_id" matches "user_id=0").
func (m Mount) HasOption(name string) bool {
	_, ok := m.Option(name)
	return ok
}

// Option returns the value of option name from the per-mount or the
// per-superblock options ("" for an option without a value), and whether
// it is there.
func (m Mount) Option(name string) (string, bool) {
	for _, list := range []string{m.Options, m.SuperOptions} {
		for _, o := range strings.Split(list, ",") {
			k, v, _ := strings.Cut(o, "=")
			if k == name {
				return v, true
			}
		}
	}
	return "", false
}

// Table is the mounts of one read of mountinfo, in the kernel's order.
type Table []Mount

// Read reads and parses /proc/self/mountinfo.
func Read() (Table, error) {
	f, err := os.Open(Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse parses mountinfo text. A malformed line fails the whole parse:
// the format is the kernel's, so one is a sign of reading the wrong file.
func Parse(r io.Reader) (Table, error) {
	var t Table
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20) // super options may be long
	for n := 1; s.Scan(); n++ {
		if strings.TrimSpace(s.Text()) == "" {
			continue
		}
		m, err := ParseLine(s.Text())
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", n, err)
		}
		t = append(t, m)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	return t, nil
}

// ParseLine parses one line of mountinfo.
func ParseLine(line string) (Mount, error) {
	fields := strings.Fields(line)
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if len(fields) < 6 || sep < 0 || len(fields) < sep+3 {
		return Mount{}, fmt.Errorf("malformed line %q", line)
	}
	var m Mount
	var err error
	if m.ID, err = strconv.Atoi(fields[0]); err != nil {
		return Mount{}, fmt.Errorf("mount ID in %q: %w", line, err)
	}
	if m.ParentID, err = strconv.Atoi(fields[1]); err != nil {
		return Mount{}, fmt.Errorf("parent ID in %q: %w", line, err)
	}
	maj, min, ok := strings.Cut(fields[2], ":")
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(min, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return Mount{}, fmt.Errorf("device number %q in %q", fields[2], line)
	}
	m.Major, m.Minor = uint32(ma), uint32(mi)
	m.Root = Unescape(fields[3])
	m.Point = Unescape(fields[4])
	m.Options = fields[5]
	if sep > 6 {
		m.Optional = fields[6:sep]
	}
	m.FSType = fields[sep+1]
	m.Source = Unescape(fields[sep+2])
	if len(fields) > sep+3 {
		m.SuperOptions = fields[sep+3]
	}
	return m, nil
}

// Unescape undoes mountinfo's octal escapes (show_mangle in the kernel
// escapes space, tab, newline and backslash: "\040" is a space). A
// backslash not followed by three octal digits is kept as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// At returns the topmost mount whose mount point is dir, and whether
// there is one. dir must be absolute; it is cleaned but symbolic links
// are not resolved (mount points never contain them).
func (t Table) At(dir string) (Mount, bool) {
	if !filepath.IsAbs(dir) {
		return Mount{}, false
	}
	dir = filepath.Clean(dir)
	for i := len(t) - 1; i >= 0; i-- {
		if t[i].Point == dir && t.visible(i) {
			return t[i], true
		}
	}
	return Mount{}, false
}

// Containing returns the mount that holds path: the visible mount with the
// longest mount point that is path or one of its ancestors (the topmost
// one where several share it). path must be absolute; it is cleaned but
// symbolic links are not resolved, so resolve them first
// (filepath.EvalSymlinks) to find where a file really lives.
func (t Table) Containing(path string) (Mount, bool) {
	if !filepath.IsAbs(path) {
		return Mount{}, false
	}
	path = filepath.Clean(path)
	best := -1
	for i := len(t) - 1; i >= 0; i-- {
		p := t[i].Point
		if !within(path, p) || (best >= 0 && len(p) <= len(t[best].Point)) {
			continue
		}
		if t.visible(i) {
			best = i
		}
	}
	if best < 0 {
		return Mount{}, false
	}
	return t[best], true
}

// visible reports whether mount i can be reached by path: no mount
// attached after it covers its mount point (sits on the same point or on
// an ancestor) unless that mount is one of its own ancestors in the tree.
func (t Table) visible(i int) bool {
	for j := i + 1; j < len(t); j++ {
		if within(t[i].Point, t[j].Point) && !t.isAncestor(t[j].ID, i) {
			return false
		}
	}
	return true
}

// isAncestor reports whether the mount with ID id is an ancestor of
// mount i in the mount tree.
func (t Table) isAncestor(id, i int) bool {
	byID := make(map[int]int, len(t))
	for k, m := range t {
		byID[m.ID] = k
	}
	for steps := 0; steps < len(t); steps++ {
		p := t[i].ParentID
		if p == id {
			return true
		}
		k, ok := byID[p]
		if !ok || k == i {
			return false
		}
		i = k
	}
	return false
}

// within reports whether path is dir or below it; both are clean and
// absolute.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || (strings.HasPrefix(path, dir) && path[len(dir)] == '/')
}
