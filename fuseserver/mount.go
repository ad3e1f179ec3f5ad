package fuseserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// mount mounts a new FUSE connection on dir and returns its /dev/fuse
// descriptor: with mount(2), or through fusermount3 when cfg.Fusermount.
func mount(dir string, cfg *Config) (int, error) {
	if cfg.Fusermount {
		return fusermount(dir, cfg)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return -1, fmt.Errorf("mount point %s: %w", dir, err)
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening /dev/fuse: %w", err)
	}
	data := []string{
		fmt.Sprintf("fd=%d", fd),
		fmt.Sprintf("rootmode=%o", st.Mode&unix.S_IFMT),
		fmt.Sprintf("user_id=%d", os.Geteuid()),
		fmt.Sprintf("group_id=%d", os.Getegid()),
		fmt.Sprintf("max_read=%d", cfg.MaxWrite),
	}
	data = append(data, cfg.Options...)
	if cfg.AllowOther {
		data = append(data, "allow_other")
	}
	source := cfg.FsName
	if source == "" {
		source = cfg.Name
	}
	if err := unix.Mount(source, dir, "fuse."+cfg.Name, cfg.MountFlags, strings.Join(data, ",")); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount(2) on %s: %w", dir, err)
	}
	return fd, nil
}

// fusermount mounts through fusermount3, which passes the /dev/fuse
// descriptor back over a socket (the _FUSE_COMMFD protocol).
func fusermount(dir string, cfg *Config) (int, error) {
	bin, err := exec.LookPath("fusermount3")
	if err != nil {
		if bin, err = exec.LookPath("fusermount"); err != nil {
			return -1, fmt.Errorf("mounting as a user needs fusermount3 (apt-get install fuse3): %w", err)
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socketpair: %w", err)
	}
	local := os.NewFile(uintptr(fds[0]), "fusermount-local")
	remote := os.NewFile(uintptr(fds[1]), "fusermount-remote")
	defer local.Close()
	defer remote.Close()

	opts := append([]string(nil), cfg.Options...)
	if cfg.AllowOther {
		opts = append(opts, "allow_other")
	}
	if cfg.FsName != "" {
		opts = append(opts, "fsname="+escapeOption(cfg.FsName))
	}
	opts = append(opts, "subtype="+cfg.Name, fmt.Sprintf("max_read=%d", cfg.MaxWrite))
	cmd := exec.Command(bin, "-o", strings.Join(opts, ","), "--", dir)
	cmd.Env = []string{"_FUSE_COMMFD=3"}
	cmd.ExtraFiles = []*os.File{remote}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return -1, fmt.Errorf("%s: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	return receiveFd(local)
}

// escapeOption escapes commas and backslashes, which separate and quote
// mount options.
func escapeOption(s string) string {
	return strings.NewReplacer(`\`, `\\`, ",", `\,`).Replace(s)
}

// receiveFd receives the one descriptor fusermount3 sends.
func receiveFd(sock *os.File) (int, error) {
	conn, err := net.FileConn(sock)
	if err != nil {
		return -1, err
	}
	defer conn.Close()
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return -1, errors.New("fusermount socket is not a unix socket")
	}
	var data [4]byte
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := uc.ReadMsgUnix(data[:], oob)
	if err != nil {
		return -1, fmt.Errorf("receiving the /dev/fuse descriptor: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("fusermount3 sent no descriptor (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("fusermount3 sent no descriptor (%v)", err)
	}
	syscall.CloseOnExec(fds[0])
	return fds[0], nil
}
