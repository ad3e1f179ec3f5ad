package fusefs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// Permission semantics as a user other than root, on a mount made by root
// with the default options: the mount must be open to every user
// (allow_other is root's default) and the kernel must decide by the modes
// (default_permissions), so that each case answers what XFS answers. The
// same cases run on a directory of the host's file system, the oracle.
//
// Each case is set up by root in this process; its checks run in a helper
// process (this test binary started again, see TestMain) as uid and gid
// 65534, which belongs to no other group.

const (
	otherUID  = 65534 // the user the checks run as (nobody)
	otherGID  = 65534
	thirdUID  = 1000 // owns "another user's" files
	thirdGID  = 1000
	sgidGroup = 4242 // a group otherUID is not in
)

// permCase is one permission case. setup runs as root on a fresh
// directory dir (mode 0755, root's) under root; check runs as otherUID and
// returns every way in which the file system answered wrongly.
type permCase struct {
	name  string
	setup func(dir string) error
	check func(root, dir string) error
}

var permCases = []permCase{
	{
		// The user can enter the mount, list it, read what the modes let
		// everyone read, and create files in a world-writable directory;
		// everything else is refused by the modes.
		name: "enter",
		setup: func(dir string) error {
			return firstErr(
				mkdirMode(filepath.Join(dir, "pub"), 0o777),
				writeMode(filepath.Join(dir, "public"), 0o644),
				writeMode(filepath.Join(dir, "secret"), 0o600),
			)
		},
		check: func(root, dir string) error {
			var errs []error
			if _, err := os.Stat(root); err != nil {
				errs = append(errs, fmt.Errorf("stat of the mount point: %w", err))
			}
			if _, err := os.ReadDir(root); err != nil {
				errs = append(errs, fmt.Errorf("listing the mount point: %w", err))
			}
			if _, err := os.ReadFile(filepath.Join(dir, "public")); err != nil {
				errs = append(errs, fmt.Errorf("reading a 0644 file: %w", err))
			}
			_, err := os.ReadFile(filepath.Join(dir, "secret"))
			errs = append(errs, wantErrno("reading another user's 0600 file", err, syscall.EACCES))
			err = os.WriteFile(filepath.Join(dir, "new"), nil, 0o644)
			errs = append(errs, wantErrno("creating in a 0755 directory of another user", err, syscall.EACCES))
			mine := filepath.Join(dir, "pub", "mine")
			if err := os.WriteFile(mine, []byte("mine"), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("creating in a 0777 directory: %w", err))
			} else {
				errs = append(errs, wantOwner(mine, otherUID, otherGID))
				if b, err := os.ReadFile(mine); err != nil || string(b) != "mine" {
					errs = append(errs, fmt.Errorf("reading back a new file: %q, %v", b, err))
				}
			}
			if err := os.Mkdir(filepath.Join(dir, "pub", "sub"), 0o755); err != nil {
				errs = append(errs, fmt.Errorf("mkdir in a 0777 directory: %w", err))
			}
			return errors.Join(errs...)
		},
	},
	{
		// Only the owner (or root) may chmod; only root may chown, and
		// the owner may change the group only to one of its own groups.
		name: "chmod-chown",
		setup: func(dir string) error {
			theirs, own, foreign := filepath.Join(dir, "theirs"), filepath.Join(dir, "own"), filepath.Join(dir, "foreign-group")
			return firstErr(
				writeMode(theirs, 0o666), os.Chown(theirs, thirdUID, thirdGID),
				writeMode(own, 0o644), os.Chown(own, otherUID, otherGID),
				writeMode(foreign, 0o644), os.Chown(foreign, otherUID, sgidGroup),
			)
		},
		check: func(root, dir string) error {
			theirs, own, foreign := filepath.Join(dir, "theirs"), filepath.Join(dir, "own"), filepath.Join(dir, "foreign-group")
			errs := []error{
				wantErrno("chmod of another user's file", os.Chmod(theirs, 0o777), syscall.EPERM),
				wantErrno("chown of another user's file to me", os.Chown(theirs, otherUID, otherGID), syscall.EPERM),
				wantErrno("chgrp of another user's file", os.Chown(theirs, -1, otherGID), syscall.EPERM),
				wantErrno("chown of my file to root", os.Chown(own, 0, -1), syscall.EPERM),
				wantErrno("chgrp of my file to a group I am not in", os.Chown(own, -1, sgidGroup), syscall.EPERM),
				wantMode(theirs, 0o666),
				wantOwner(theirs, thirdUID, thirdGID),
			}
			if err := os.Chmod(own, 0o600); err != nil {
				errs = append(errs, fmt.Errorf("chmod of my own file: %w", err))
			}
			errs = append(errs, wantMode(own, 0o600))
			// chmod g+s of a file whose group the caller is not in: the
			// kernel drops S_ISGID silently.
			if err := syscall.Chmod(foreign, 0o2755); err != nil {
				errs = append(errs, fmt.Errorf("chmod 2755 of my file in a foreign group: %w", err))
			}
			errs = append(errs, wantMode(foreign, 0o755))
			return errors.Join(errs...)
		},
	},
	{
		// In a sticky directory only the owner of an entry (or of the
		// directory, or root) may unlink or rename it, even when the
		// directory is world-writable.
		name: "sticky",
		setup: func(dir string) error {
			s := filepath.Join(dir, "sticky")
			return firstErr(
				mkdirMode(s, 0o1777),
				writeMode(filepath.Join(s, "theirs"), 0o666), os.Chown(filepath.Join(s, "theirs"), thirdUID, thirdGID),
				mkdirMode(filepath.Join(s, "theirdir"), 0o777), os.Chown(filepath.Join(s, "theirdir"), thirdUID, thirdGID),
				writeMode(filepath.Join(s, "own"), 0o644), os.Chown(filepath.Join(s, "own"), otherUID, otherGID),
			)
		},
		check: func(root, dir string) error {
			s := filepath.Join(dir, "sticky")
			errs := []error{
				wantErrno("unlink of another user's file in a sticky directory", os.Remove(filepath.Join(s, "theirs")), syscall.EPERM),
				wantErrno("rename of another user's file in a sticky directory", os.Rename(filepath.Join(s, "theirs"), filepath.Join(s, "moved")), syscall.EPERM),
				wantErrno("rmdir of another user's directory in a sticky directory", syscall.Rmdir(filepath.Join(s, "theirdir")), syscall.EPERM),
				wantErrno("rename of my file over another user's file in a sticky directory", os.Rename(filepath.Join(s, "own"), filepath.Join(s, "theirs")), syscall.EPERM),
			}
			if err := os.Rename(filepath.Join(s, "own"), filepath.Join(s, "own2")); err != nil {
				errs = append(errs, fmt.Errorf("rename of my own file in a sticky directory: %w", err))
			}
			if err := os.Remove(filepath.Join(s, "own2")); err != nil {
				errs = append(errs, fmt.Errorf("unlink of my own file in a sticky directory: %w", err))
			}
			// Writing another user's world-writable file is still allowed:
			// the sticky bit guards names, not contents.
			if err := os.WriteFile(filepath.Join(s, "theirs"), []byte("x"), 0); err != nil {
				errs = append(errs, fmt.Errorf("writing another user's 0666 file in a sticky directory: %w", err))
			}
			for _, name := range []string{"theirs", "theirdir"} {
				if _, err := os.Lstat(filepath.Join(s, name)); err != nil {
					errs = append(errs, fmt.Errorf("%s after the refused removals: %w", name, err))
				}
			}
			return errors.Join(errs...)
		},
	},
	{
		// A set-group-ID directory gives new entries its group; new
		// subdirectories keep the bit; a new file asking for S_ISGID in a
		// group its creator is not in does not get it (inode_init_owner,
		// mode_strip_sgid).
		name: "setgid-dir",
		setup: func(dir string) error {
			g := filepath.Join(dir, "sgid")
			return firstErr(mkdirMode(g, 0o777), os.Chown(g, 0, sgidGroup), syscall.Chmod(g, 0o2777))
		},
		check: func(root, dir string) error {
			g := filepath.Join(dir, "sgid")
			var errs []error
			f := filepath.Join(g, "f")
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				return fmt.Errorf("creating in a 2777 directory: %w", err)
			}
			errs = append(errs, wantOwner(f, otherUID, sgidGroup), wantMode(f, 0o644))
			d := filepath.Join(g, "d")
			if err := os.Mkdir(d, 0o755); err != nil {
				return fmt.Errorf("mkdir in a 2777 directory: %w", err)
			}
			errs = append(errs, wantOwner(d, otherUID, sgidGroup), wantMode(d, 0o2755))
			f2 := filepath.Join(d, "f2")
			if err := os.WriteFile(f2, nil, 0o644); err != nil {
				errs = append(errs, fmt.Errorf("creating in the new subdirectory: %w", err))
			} else {
				errs = append(errs, wantOwner(f2, otherUID, sgidGroup))
			}
			x := filepath.Join(g, "x")
			fd, err := syscall.Open(x, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o2755)
			if err != nil {
				errs = append(errs, fmt.Errorf("creating with mode 2755: %w", err))
			} else {
				syscall.Close(fd)
				errs = append(errs, wantOwner(x, otherUID, sgidGroup), wantMode(x, 0o755))
			}
			return errors.Join(errs...)
		},
	},
	{
		// A write or truncate by a user other than root clears S_ISUID,
		// and S_ISGID when the group may execute (a set-group-ID file
		// without group execute is a mandatory-locking candidate and keeps
		// it).
		name: "killpriv-write",
		setup: func(dir string) error {
			return firstErr(
				writeMode(filepath.Join(dir, "suid"), 0o6777),
				// In the writer's group, so that only the missing group
				// execute keeps S_ISGID (since Linux 6.2 a writer outside
				// the group clears it regardless: setattr_should_drop_sgid).
				writeMode(filepath.Join(dir, "sgid-nox"), 0o2666), os.Chown(filepath.Join(dir, "sgid-nox"), 0, otherGID),
				writeMode(filepath.Join(dir, "trunc"), 0o4777),
				writeMode(filepath.Join(dir, "otrunc"), 0o4777),
			)
		},
		check: func(root, dir string) error {
			var errs []error
			for _, c := range []struct {
				name string
				want uint32
			}{{"suid", 0o777}, {"sgid-nox", 0o2666}} {
				p := filepath.Join(dir, c.name)
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err != nil {
					errs = append(errs, fmt.Errorf("open %s for writing: %w", c.name, err))
					continue
				}
				_, err = f.WriteAt([]byte("y"), 0)
				f.Close()
				if err != nil {
					errs = append(errs, fmt.Errorf("write %s: %w", c.name, err))
					continue
				}
				errs = append(errs, wantMode(p, c.want))
			}
			p := filepath.Join(dir, "trunc")
			if err := os.Truncate(p, 0); err != nil {
				errs = append(errs, fmt.Errorf("truncate: %w", err))
			}
			errs = append(errs, wantMode(p, 0o777))
			p = filepath.Join(dir, "otrunc")
			if f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0); err != nil {
				errs = append(errs, fmt.Errorf("open O_TRUNC: %w", err))
			} else {
				f.Close()
			}
			errs = append(errs, wantMode(p, 0o777))
			return errors.Join(errs...)
		},
	},
	{
		// A chown by a user other than root (here: to its own group)
		// clears S_ISUID, and S_ISGID when the group may execute.
		name: "killpriv-chown",
		setup: func(dir string) error {
			p := filepath.Join(dir, "own-suid")
			return firstErr(writeMode(p, 0o755), os.Chown(p, otherUID, otherGID), syscall.Chmod(p, 0o6755))
		},
		check: func(root, dir string) error {
			p := filepath.Join(dir, "own-suid")
			if err := wantMode(p, 0o6755); err != nil {
				return fmt.Errorf("before chown: %w", err)
			}
			if err := os.Chown(p, otherUID, otherGID); err != nil {
				return fmt.Errorf("chown of my file to myself: %w", err)
			}
			return wantMode(p, 0o755)
		},
	},
}

// TestPermissionsAsOtherUser runs permCases as otherUID on the host's file
// system (the oracle) and on a sluice mount made by root with default
// options.
func TestPermissionsAsOtherUser(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to set up files of several users and to run the checks as another user")
	}
	targets := []struct {
		name string
		root func(t *testing.T) string
	}{
		{"kernel", func(t *testing.T) string { return publicTempDir(t) }},
		{"sluice", func(t *testing.T) string { return newMountEnv(t, envOpts{public: true}).dir }},
	}
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			root := target.root(t)
			for _, c := range permCases {
				t.Run(c.name, func(t *testing.T) {
					dir := filepath.Join(root, c.name)
					if err := mkdirMode(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := c.setup(dir); err != nil {
						t.Fatalf("setup as root: %v", err)
					}
					if out, err := runHelperAs(t, otherUID, otherGID, "perm", c.name, root, dir); err != nil {
						t.Errorf("as uid %d: %v\n%s", otherUID, err, out)
					}
				})
			}
		})
	}
}

// helperPerm runs the check of permCase args[0] with root args[1] and
// directory args[2].
func helperPerm(args []string) error {
	for _, c := range permCases {
		if c.name == args[0] {
			return c.check(args[1], args[2])
		}
	}
	return fmt.Errorf("no permission case %q", args[0])
}

var (
	publicBinOnce sync.Once
	publicBin     string
	publicBinErr  error
	publicBinDir  string
)

// runHelperAs runs helper name, like runHelper, as uid and gid (no
// supplementary groups), from a copy of the test binary that every user
// may run (go test builds it in a directory only its user may enter). It
// returns the helper's output and its failure.
func runHelperAs(t testing.TB, uid, gid uint32, name string, args ...string) (string, error) {
	t.Helper()
	publicBinOnce.Do(func() {
		publicBinDir, publicBinErr = os.MkdirTemp("", "fusefs-test-bin")
		if publicBinErr != nil {
			return
		}
		publicBin = filepath.Join(publicBinDir, "fusefs.test")
		publicBinErr = firstErr(os.Chmod(publicBinDir, 0o755), copyFile(publicBin, os.Args[0], 0o755))
	})
	if publicBinErr != nil {
		t.Fatal(publicBinErr)
	}
	for len(args) < 5 {
		args = append(args, "")
	}
	cmd := exec.Command(publicBin, append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "SLUICE_FUSEFS_HELPER="+name)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// publicTempDir returns a temporary directory that every user may enter.
func publicTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fusefs-public")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(dst, src string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// mkdirMode makes directory path with exactly mode, as chmod(2) takes it
// (0o1777: sticky and world-writable).
func mkdirMode(path string, mode uint32) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return err
	}
	return syscall.Chmod(path, mode)
}

// writeMode creates file path holding "x" with exactly mode, as chmod(2)
// takes it.
func writeMode(path string, mode uint32) error {
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		return err
	}
	return syscall.Chmod(path, mode)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// wantErrno returns nil if err is the errno want, or a description of
// what op got instead.
func wantErrno(op string, err error, want syscall.Errno) error {
	var got syscall.Errno
	if errors.As(err, &got) && got == want {
		return nil
	}
	return fmt.Errorf("%s: got %v, want %v (%s)", op, err, want, errnoName(want))
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EPERM:
		return "EPERM"
	case syscall.EACCES:
		return "EACCES"
	}
	return fmt.Sprint(int(e))
}

// wantMode checks the permission bits, set-user-ID, set-group-ID and
// sticky bits of path (as chmod(1) writes them: 0o4755 is set-user-ID
// 0755).
func wantMode(path string, want uint32) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return err
	}
	if got := st.Mode & 0o7777; got != want {
		return fmt.Errorf("%s: mode %04o, want %04o", filepath.Base(path), got, want)
	}
	return nil
}

func wantOwner(path string, uid, gid uint32) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return err
	}
	if st.Uid != uid || st.Gid != gid {
		return fmt.Errorf("%s: owner %d:%d, want %d:%d", filepath.Base(path), st.Uid, st.Gid, uid, gid)
	}
	return nil
}
