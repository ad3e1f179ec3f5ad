package fusefs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// How Options become a mount.
//
// As root, Mount calls mount(2) itself (go-fuse's DirectMountStrict): the
// flag options become mount flags (MS_*), and the data string carries only
// what the FUSE file system type understands (fd, rootmode, user_id,
// group_id, max_read, default_permissions, allow_other). Otherwise go-fuse
// runs fusermount3, a set-user-ID helper that takes the options by name,
// applies its own rules (nosuid and nodev always, allow_other only with
// user_allow_other in /etc/fuse.conf) and knows fewer flags; Mount checks
// those rules first so that a refusal says why.

// mountFlag is a mount option that mount(2) takes as a flag (MS_*).
type mountFlag struct {
	set, clear uintptr
	// fusermount says whether fusermount3 takes the option from a user
	// other than root (libfuse's mount_flags table; suid and dev it
	// ignores with "unsafe option", the others it does not know).
	fusermount bool
}

// mountFlags are the flag options, as mount(8) spells them.
var mountFlags = map[string]mountFlag{
	"ro":          {set: unix.MS_RDONLY, fusermount: true},
	"rw":          {clear: unix.MS_RDONLY, fusermount: true},
	"nosuid":      {set: unix.MS_NOSUID, fusermount: true},
	"suid":        {clear: unix.MS_NOSUID},
	"nodev":       {set: unix.MS_NODEV, fusermount: true},
	"dev":         {clear: unix.MS_NODEV},
	"noexec":      {set: unix.MS_NOEXEC, fusermount: true},
	"exec":        {clear: unix.MS_NOEXEC, fusermount: true},
	"noatime":     {set: unix.MS_NOATIME, fusermount: true},
	"atime":       {clear: unix.MS_NOATIME, fusermount: true},
	"sync":        {set: unix.MS_SYNCHRONOUS, fusermount: true},
	"async":       {clear: unix.MS_SYNCHRONOUS, fusermount: true},
	"dirsync":     {set: unix.MS_DIRSYNC, fusermount: true},
	"nodiratime":  {set: unix.MS_NODIRATIME},
	"diratime":    {clear: unix.MS_NODIRATIME},
	"relatime":    {set: unix.MS_RELATIME},
	"strictatime": {set: unix.MS_STRICTATIME, clear: unix.MS_RELATIME | unix.MS_NOATIME},
	"lazytime":    {set: unix.MS_LAZYTIME},
	"nolazytime":  {clear: unix.MS_LAZYTIME},
	"nosymfollow": {set: unix.MS_NOSYMFOLLOW},
	"symfollow":   {clear: unix.MS_NOSYMFOLLOW},
}

// defaultMountFlags are the flags of every FUSE mount unless root asks
// otherwise (fusermount3 and libfuse do the same).
const defaultMountFlags = unix.MS_NOSUID | unix.MS_NODEV

// checkMountOption reports whether name is an option Mount takes.
func checkMountOption(name string) error {
	if _, ok := mountFlags[name]; ok {
		return nil
	}
	switch name {
	case "allow_other", "default_permissions":
		return nil
	case "allow_root":
		return errors.New("mount option allow_root is not supported (it needs the daemon to check every request's uid): use allow_other, and the modes of the directories to keep users out")
	}
	known := []string{"allow_other", "default_permissions"}
	for k := range mountFlags {
		known = append(known, k)
	}
	sort.Strings(known)
	return fmt.Errorf("unknown mount option %q (sluice takes: %s)", name, strings.Join(known, ", "))
}

// kernelMount is what Mount asks the kernel (or fusermount3) for.
type kernelMount struct {
	// allowOther is the allow_other option: every user may use the mount.
	allowOther bool
	// flags are mount(2)'s flags, for a mount made by root.
	flags uintptr
	// options are the options passed by name: for root, the FUSE data
	// options; for fusermount3, those and the flag options.
	options []string
}

// fuseConfPath is fusermount3's configuration file.
var fuseConfPath = "/etc/fuse.conf"

// resolveMount turns o (after EnsureDefaults and Validate) into the
// mount that a process with effective user ID euid makes: root mounts
// with mount(2), every other user through fusermount3. It refuses what
// fusermount3 would refuse or ignore for a user other than root, saying
// why.
func resolveMount(o *Options, euid int) (kernelMount, error) {
	root := euid == 0
	km := kernelMount{flags: defaultMountFlags, options: []string{"default_permissions"}}
	access := o.Access
	names := o.MountOptions
	if o.ReadOnly {
		// Last, so that an "rw" among the options cannot undo it: the
		// engine is open read-only.
		names = append(slices.Clone(names), "ro")
	}
	var errs []error
	for _, name := range names {
		if name == "allow_other" {
			access = AccessEveryone
			continue
		}
		if name == "default_permissions" {
			continue
		}
		f, ok := mountFlags[name]
		if !ok {
			errs = append(errs, checkMountOption(name))
			continue
		}
		km.flags = km.flags&^f.clear | f.set
		if root {
			continue
		}
		if !f.fusermount {
			if name == "suid" || name == "dev" {
				errs = append(errs, fmt.Errorf("mount option %s needs a mount made by root (fusermount3 ignores it for other users: a FUSE mount made by a user is always nosuid and nodev)", name))
			} else {
				errs = append(errs, fmt.Errorf("mount option %s needs a mount made by root (fusermount3 does not take it)", name))
			}
			continue
		}
		km.options = append(km.options, name)
	}
	switch access {
	case AccessEveryone:
		km.allowOther = true
	case AccessAuto:
		km.allowOther = root
	}
	if km.allowOther && !root {
		// A file this user cannot read is left to fusermount3 to judge.
		if ok, err := userAllowOther(fuseConfPath); err == nil && !ok {
			errs = append(errs, fmt.Errorf("allow_other: a mount made by a user other than root may be opened to every user only if %s has the line user_allow_other (an administrator adds it; or mount as root, where every user is allowed by default)", fuseConfPath))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return kernelMount{}, err
	}
	if km.flags == 0 {
		// go-fuse takes DirectMountFlags 0 to mean its default (nosuid,
		// nodev); MS_MGC_VAL is the kernel's "no flags" (mount(2)).
		km.flags = syscall.MS_MGC_VAL
	}
	return km, nil
}

// userAllowOther reports whether fusermount3's configuration file at path
// has the line user_allow_other, read as fusermount3 reads it: a '#'
// starts a comment, surrounding white space is ignored. A missing file
// has no such line.
func userAllowOther(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		if strings.TrimSpace(line) == "user_allow_other" {
			return true, nil
		}
	}
	return false, s.Err()
}
