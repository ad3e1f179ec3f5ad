package fusefs

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// withFuseConf points resolveMount at a fuse.conf holding text (none when
// text is "-") for the rest of the test.
func withFuseConf(t *testing.T, text string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fuse.conf")
	if text != "-" {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := fuseConfPath
	fuseConfPath = path
	t.Cleanup(func() { fuseConfPath = old })
}

func resolve(t *testing.T, o Options, euid int) (kernelMount, error) {
	t.Helper()
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return kernelMount{}, err
	}
	return resolveMount(&o, euid)
}

// TestResolveMountRoot: a mount made by root is open to every user by
// default, keeps default_permissions, is nosuid,nodev unless asked, and
// turns flag options into mount flags (none into the data string, where
// the kernel would refuse them).
func TestResolveMountRoot(t *testing.T) {
	withFuseConf(t, "-") // root does not need user_allow_other
	for _, c := range []struct {
		name       string
		o          Options
		allowOther bool
		flags      uintptr
	}{
		{"default", Options{}, true, unix.MS_NOSUID | unix.MS_NODEV},
		{"mounter only", Options{Access: AccessMounter}, false, unix.MS_NOSUID | unix.MS_NODEV},
		{"allow_other", Options{MountOptions: []string{"allow_other"}}, true, unix.MS_NOSUID | unix.MS_NODEV},
		{"read-only field", Options{ReadOnly: true}, true, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_RDONLY},
		{"flags", Options{MountOptions: []string{"noexec", "noatime", "ro", "dirsync", "sync"}}, true,
			unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_RDONLY | unix.MS_DIRSYNC | unix.MS_SYNCHRONOUS},
		{"suid,dev", Options{MountOptions: []string{"suid", "dev"}}, true, syscall.MS_MGC_VAL},
		{"later wins", Options{MountOptions: []string{"noexec", "exec", "ro", "rw", "noatime", "strictatime"}}, true,
			unix.MS_NOSUID | unix.MS_NODEV | unix.MS_STRICTATIME},
		{"root-only flags", Options{MountOptions: []string{"nodiratime", "lazytime", "nosymfollow", "relatime"}}, true,
			unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NODIRATIME | unix.MS_LAZYTIME | unix.MS_NOSYMFOLLOW | unix.MS_RELATIME},
	} {
		t.Run(c.name, func(t *testing.T) {
			km, err := resolve(t, c.o, 0)
			if err != nil {
				t.Fatal(err)
			}
			if km.allowOther != c.allowOther || km.flags != c.flags {
				t.Errorf("allow_other %t flags %#x, want %t %#x", km.allowOther, km.flags, c.allowOther, c.flags)
			}
			if !reflect.DeepEqual(km.options, []string{"default_permissions"}) {
				t.Errorf("data options %q, want only default_permissions", km.options)
			}
		})
	}
}

// TestResolveMountUser: a mount made by another user keeps FUSE's default
// (that user only), passes flag options to fusermount3 by name, and
// refuses with a reason what fusermount3 would refuse or ignore.
func TestResolveMountUser(t *testing.T) {
	const uid = 1000
	t.Run("default", func(t *testing.T) {
		withFuseConf(t, "user_allow_other\n")
		km, err := resolve(t, Options{}, uid)
		if err != nil || km.allowOther {
			t.Fatalf("allow_other %t, %v; want the mounting user only", km.allowOther, err)
		}
	})
	t.Run("flags by name", func(t *testing.T) {
		withFuseConf(t, "-")
		km, err := resolve(t, Options{ReadOnly: true, MountOptions: []string{"noexec", "noatime", "nosuid"}}, uid)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"default_permissions", "noexec", "noatime", "nosuid", "ro"}; !reflect.DeepEqual(km.options, want) {
			t.Errorf("options %q, want %q", km.options, want)
		}
	})
	for _, conf := range []string{"user_allow_other\n", "  user_allow_other  # for sluice\nmount_max = 100\n"} {
		t.Run("allow_other permitted", func(t *testing.T) {
			withFuseConf(t, conf)
			for _, o := range []Options{{Access: AccessEveryone}, {MountOptions: []string{"allow_other"}}} {
				if km, err := resolve(t, o, uid); err != nil || !km.allowOther {
					t.Errorf("%+v with %q: allow_other %t, %v", o, conf, km.allowOther, err)
				}
			}
		})
	}
	for _, conf := range []string{"-", "", "#user_allow_other\n", "user_allow_others\n"} {
		t.Run("allow_other refused", func(t *testing.T) {
			withFuseConf(t, conf)
			_, err := resolve(t, Options{MountOptions: []string{"allow_other"}}, uid)
			if err == nil || !strings.Contains(err.Error(), "user_allow_other") || !strings.Contains(err.Error(), fuseConfPath) {
				t.Errorf("fuse.conf %q: %v; want a refusal naming user_allow_other and the file", conf, err)
			}
		})
	}
	t.Run("root-only options", func(t *testing.T) {
		withFuseConf(t, "-")
		_, err := resolve(t, Options{MountOptions: []string{"suid", "dev", "lazytime"}}, uid)
		for _, name := range []string{"suid", "dev", "lazytime"} {
			if err == nil || !strings.Contains(err.Error(), "option "+name+" needs a mount made by root") {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
}

// TestMountOptionsValidate: unknown options and contradictions are refused
// by Validate, all at once.
func TestMountOptionsValidate(t *testing.T) {
	o := Options{Access: AccessMounter, MountOptions: []string{"allow_other", "allow_root", "nonsense", "noexec"}}
	o.EnsureDefaults()
	err := o.Validate()
	for _, want := range []string{"contradicts AccessMounter", "allow_root is not supported", `unknown mount option "nonsense"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), `"noexec"`) {
		t.Errorf("noexec refused: %v", err)
	}
}

// TestMountOptionsTakeEffect: what a mount made by root gets, read back
// from /proc/self/mountinfo: by default allow_other and
// default_permissions, nosuid and nodev; -o flags reach the mount.
func TestMountOptionsTakeEffect(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: a mount through fusermount3 is checked by TestUnprivilegedMount")
	}
	for _, c := range []struct {
		name    string
		o       Options
		has     []string
		hasNot  []string
		roMount bool
	}{
		{"default", Options{}, []string{"allow_other", "default_permissions", "nosuid", "nodev", "rw"}, []string{"noexec", "noatime", "ro"}, false},
		{"mounter", Options{Access: AccessMounter}, []string{"default_permissions"}, []string{"allow_other"}, false},
		{"suid,dev,noexec,noatime", Options{MountOptions: []string{"suid", "dev", "noexec", "noatime"}},
			[]string{"allow_other", "noexec", "noatime"}, []string{"nosuid", "nodev"}, false},
		{"ro,nosymfollow,sync", Options{MountOptions: []string{"ro", "nosymfollow", "sync", "exec"}},
			[]string{"ro", "nosymfollow", "sync", "nosuid", "nodev"}, []string{"noexec", "rw"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			eo := envOpts{fuse: c.o}
			eo.engine.ReadOnly = c.roMount
			e := newMountEnv(t, eo)
			m, ok := FindMount(e.dir)
			if !ok {
				t.Fatalf("%s is not a mount point", e.dir)
			}
			for _, o := range c.has {
				if !m.HasOption(o) {
					t.Errorf("option %s missing: %s / %s", o, m.Options, m.SuperOptions)
				}
			}
			for _, o := range c.hasNot {
				if m.HasOption(o) {
					t.Errorf("option %s present: %s / %s", o, m.Options, m.SuperOptions)
				}
			}
			if m.FSType != "fuse.sluice" {
				t.Errorf("type %q", m.FSType)
			}
		})
	}
}

// TestReadOnlyWinsOverRW: an engine opened read-only is mounted read-only,
// whatever "rw" the options carry, by root and through fusermount3.
func TestReadOnlyWinsOverRW(t *testing.T) {
	o := Options{ReadOnly: true, MountOptions: []string{"rw"}}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, euid := range []int{0, 1000} {
		km, err := resolveMount(&o, euid)
		if err != nil {
			t.Fatalf("euid %d: %v", euid, err)
		}
		if euid == 0 && km.flags&unix.MS_RDONLY == 0 {
			t.Errorf("euid 0: mount flags %#x lack MS_RDONLY", km.flags)
		}
		if euid != 0 && slices.Index(km.options, "ro") < slices.Index(km.options, "rw") {
			t.Errorf("euid %d: fusermount3 options %v: rw comes after ro", euid, km.options)
		}
		if euid != 0 && !slices.Contains(km.options, "ro") {
			t.Errorf("euid %d: fusermount3 options %v lack ro", euid, km.options)
		}
	}
}
