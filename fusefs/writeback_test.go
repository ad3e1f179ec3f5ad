package fusefs

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// dropFileCache makes the kernel forget the cached pages of the file at
// p: written back first, then dropped (POSIX_FADV_DONTNEED drops clean
// pages only).
func dropFileCache(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// TestWriteOnlyPartialPage: writes through an O_WRONLY descriptor that
// cover part of a page the kernel does not cache (an append, an
// overwrite, sendfile into it) work in every cache mode. With the
// writeback cache the kernel reads the page first through the handle
// the write came with, write-only or not (fuse_write_begin), so the
// daemon must be able to read through it.
func TestWriteOnlyPartialPage(t *testing.T) {
	for _, c := range cacheConfigs {
		t.Run(c.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{fuse: c.opts})
			p := e.path("f")
			if err := os.WriteFile(p, []byte("line1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			src := e.path("src")
			if err := os.WriteFile(src, []byte("sent\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			want := []byte("line1\n")
			steps := []struct {
				what string
				do   func(f *os.File) error
				want func()
			}{
				{"append", func(f *os.File) error {
					_, err := f.Write([]byte("line2\n"))
					return err
				}, func() { want = append(want, "line2\n"...) }},
				{"overwrite", func(f *os.File) error {
					_, err := f.WriteAt([]byte("XY"), 2)
					return err
				}, func() { copy(want[2:], "XY") }},
				{"sendfile", func(f *os.File) error {
					s, err := os.Open(src)
					if err != nil {
						return err
					}
					defer s.Close()
					if _, err := f.Seek(0, 2); err != nil {
						return err
					}
					_, err = unix.Sendfile(int(f.Fd()), int(s.Fd()), nil, 5)
					return err
				}, func() { want = append(want, "sent\n"...) }},
			}
			for _, s := range steps {
				dropFileCache(t, p)
				flags := os.O_WRONLY
				if s.what == "append" {
					flags |= os.O_APPEND
				}
				f, err := os.OpenFile(p, flags, 0)
				if err != nil {
					t.Fatal(err)
				}
				err = s.do(f)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					t.Fatalf("%s through an O_WRONLY descriptor: %v", s.what, err)
				}
				s.want()
				if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("after the %s: %q, %v; want %q", s.what, got, err, want)
				}
			}
			e.checkClean()
		})
	}
}

// TestSyncFSAfterUnlink: syncfs(2) succeeds after a written file is
// unlinked. With the writeback cache the kernel writes the times it keeps
// of the unlinked inode back (SETATTR) after the engine freed it, and an
// error there is reported by the next syncfs.
func TestSyncFSAfterUnlink(t *testing.T) {
	for _, c := range cacheConfigs {
		t.Run(c.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{fuse: c.opts})
			d, err := os.Open(e.dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			for i := range 20 {
				p := e.path("f")
				if err := os.WriteFile(p, []byte("data\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				if err := unix.Syncfs(int(d.Fd())); err != nil {
					t.Fatalf("syncfs after unlink %d: %v", i, err)
				}
			}
			e.checkClean()
		})
	}
}

// TestSeekDataWithDirtyPages: SEEK_DATA and SEEK_HOLE never call data a
// hole, in every cache mode: with the writeback cache the kernel asks
// without writing its dirty pages back, so the daemon declines (ENOSYS)
// and the file is all data up to its size.
func TestSeekDataWithDirtyPages(t *testing.T) {
	for _, c := range cacheConfigs {
		t.Run(c.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{fuse: c.opts, cacheSet: true})
			f, err := os.Create(e.path("f"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			const mib = 1 << 20
			if _, err := f.WriteAt(pattern(4096, 1), mib); err != nil {
				t.Fatal(err)
			}
			data, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
			if err != nil || data > mib {
				t.Fatalf("SEEK_DATA from 0 = %d, %v: the data at %d is missed", data, err, mib)
			}
			hole, err := unix.Seek(int(f.Fd()), mib, unix.SEEK_HOLE)
			if err != nil || hole != mib+4096 {
				t.Fatalf("SEEK_HOLE from %d = %d, %v; want %d", mib, hole, err, mib+4096)
			}
		})
	}
}

// TestTimesOfRemovedDirectory: setting the mtime of a directory removed
// meanwhile (reached through an O_PATH descriptor) fails with ENOENT in
// every cache mode, and leaves the kernel's inode sound: the success
// answered to the writeback cache's flush of a freed file's times is for
// regular files only (its reply says S_IFREG, which for a directory the
// kernel would take as a changed type and mark the inode bad: EIO).
func TestTimesOfRemovedDirectory(t *testing.T) {
	for _, c := range cacheConfigs {
		t.Run(c.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{fuse: c.opts, cacheSet: true})
			p := e.path("d")
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(1e18)}
			if err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH); err != nil && err != unix.ENOENT {
				t.Errorf("utimensat(mtime) of a removed directory: %v, want ENOENT or success", err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err == unix.EIO {
				t.Errorf("fstat of the removed directory: %v (the kernel marked its inode bad)", err)
			}
		})
	}
}
