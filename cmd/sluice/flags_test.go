package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The command-line syntax: --help, flags anywhere, Go-style flags, unknown
// flags and commands, completion.

// subcommand returns the command name of a fresh tree.
func subcommand(t *testing.T, name string) *cobra.Command {
	t.Helper()
	for _, c := range newRootCommand(nil, io.Discard, io.Discard).Commands() {
		if c.Name() == name {
			return c
		}
	}
	t.Fatalf("no command %q", name)
	return nil
}

var commandNames = []string{"mkfs", "mount", "umount", "stat", "fsck", "scrub", "bench"}

// TestHelp: --help (and -h, -help, help CMD) on every command prints its
// usage and every flag with its default to stdout, and exits 0, whatever
// else is on the line.
func TestHelp(t *testing.T) {
	for _, name := range commandNames {
		for _, args := range [][]string{
			{name, "--help"},
			{name, "-h"},
			{name, "-help"},
			{"help", name},
			{name, "A", "B", "--help"},
		} {
			code, out, errOut := sluiceRun(t, args...)
			if code != 0 || errOut != "" {
				t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
				continue
			}
			if !strings.Contains(out, "Usage:\n  sluice "+name+" ") {
				t.Errorf("%v: no usage line:\n%s", args, out)
			}
			lines := strings.Split(out, "\n")
			subcommand(t, name).Flags().VisitAll(func(f *pflag.Flag) {
				i := slices.IndexFunc(lines, func(l string) bool {
					l = strings.TrimSpace(l)
					return strings.HasPrefix(l, "-") && (strings.Contains(l, "--"+f.Name+" ") || strings.HasSuffix(l, "--"+f.Name))
				})
				if i < 0 {
					t.Errorf("%v: --%s is not listed:\n%s", args, f.Name, out)
					return
				}
				if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "[]" &&
					!strings.Contains(lines[i], "(default ") {
					t.Errorf("%v: --%s does not show its default %q: %q", args, f.Name, f.DefValue, lines[i])
				}
			})
		}
	}

	// The defaults users look for, as they are shown.
	for _, c := range []struct {
		name  string
		wants []string
	}{
		{"mkfs", []string{"--size SIZE", `--block-size SIZE`, `(default "4096")`, "--io-unit SIZE", `(default "512")`,
			"--prealloc", "--data BLOCKDEV", "--force", "--data-checksums", "(off by default)", "docs/ARCHITECTURE.md, Data checksums"}},
		{"mount", []string{`--policy POLICY`, `(default "concurrent")`, `--cache-size SIZE`, `(default "256M")`,
			"--metrics ADDR", "-o, --options OPTS", "--debug", `(default "16G")`, `(default "kernel")`, "(default 128)", "(default 10s)"}},
		{"umount", []string{"--lazy", "--force", "--timeout DURATION", "(default 1m0s)"}},
		{"stat", []string{"--json"}},
		{"fsck", []string{"--json", "0 clean; 1 problems found", "8 the check could not run", "--no-data", "data-checksum"}},
		{"scrub", []string{"--json", "--rate RATE", "no limit offline, 64M through a mount", "VOLUME/control",
			"0 clean (or nothing to verify); 1 damaged blocks found", "8 the scrub could not run"}},
		{"bench", []string{"--quick", "--only W1,W3", "--json FILE", "--html FILE", "--kernel-peers", "(default: 1s, --quick 250ms)"}},
	} {
		_, out, _ := sluiceRun(t, c.name, "--help")
		for _, w := range c.wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %q:\n%s", c.name, w, out)
			}
		}
	}

	// mount's help states who may use the mount.
	_, out, _ := sluiceRun(t, "mount", "--help")
	flat := strings.Join(strings.Fields(out), " ")
	for _, w := range []string{
		"A mount made by root is open to every user, with the kernel enforcing file modes (default_permissions), as on XFS.",
		"An unprivileged mount (through fusermount3) keeps FUSE's default: only the mounting user may enter, unless /etc/fuse.conf has user_allow_other and `-o allow_other` is given.",
		"`-o` passes allow_other, ro, suid, nosuid, dev, nodev, exec, noexec, noatime through.",
	} {
		if !strings.Contains(flat, w) {
			t.Errorf("mount --help lacks %q:\n%s", w, out)
		}
	}

	// The top level lists every command.
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := sluiceRun(t, args...)
		if code != 0 || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
		for _, name := range append(commandNames, "completion") {
			if !strings.Contains(out, "\n  "+name+" ") {
				t.Errorf("%v does not list %s:\n%s", args, name, out)
			}
		}
	}

	// --help does nothing else.
	dir := filepath.Join(t.TempDir(), "vol")
	if code, _, _ := sluiceRun(t, "mkfs", dir, "--size", "4M", "--help"); code != 0 {
		t.Errorf("mkfs --help: exit %d", code)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("mkfs --help made %s", dir)
	}
}

// TestFlagsAnywhere: flags are taken before, between and after the
// positional arguments, with two dashes or (as the flag package took them)
// one.
func TestFlagsAnywhere(t *testing.T) {
	for _, args := range [][]string{
		{"mkfs", "VOL", "--size", "4M", "--block-size", "8K"},
		{"mkfs", "--size", "4M", "VOL", "--block-size=8K"},
		{"mkfs", "--size=4M", "--block-size", "8K", "VOL"},
		{"mkfs", "VOL", "-size", "4M", "-block-size=8K"},
		{"mkfs", "-prealloc", "VOL", "--size", "4M", "--block-size", "8K", "--prealloc=false"},
	} {
		dir := filepath.Join(t.TempDir(), "vol")
		args = slices.Clone(args)
		args[slices.Index(args, "VOL")] = dir
		if code, out, errOut := sluiceRun(t, args...); code != 0 || !strings.HasPrefix(out, "created volume "+dir) {
			t.Errorf("%v: exit %d: %s%s", args, code, out, errOut)
			continue
		}
		if j := statJSONOf(t, dir); j["block_size"] != 8192.0 || j["device_bytes"] != float64(4<<20) {
			t.Errorf("%v: made %v", args, j)
		}
		for _, a := range [][]string{{"stat", dir, "--json"}, {"stat", "-json", dir}, {"fsck", dir, "-json=true"}, {"fsck", "--json", "--", dir}} {
			if code, out, errOut := sluiceRun(t, a...); code != 0 || !strings.HasPrefix(out, "{") {
				t.Errorf("%v: exit %d: %s%s", a, code, out, errOut)
			}
		}
	}

	// mount checks its flags before it creates, opens or mounts anything:
	// a bad value after the positional arguments is refused by name.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "bogus"}, "--policy: "},
		{[]string{"--cache-size", "12X"}, `--cache-size: invalid size "12X"`},
		{[]string{"-cache", "nfs"}, `--cache: unknown cache mode "nfs"`},
		{[]string{"-o", "ro", "--grace", "soon"}, `invalid argument "soon" for "--grace" flag`},
	} {
		tmp := t.TempDir()
		vol := filepath.Join(tmp, "vol")
		args := append([]string{"mount", vol, tmp}, c.args...)
		code, out, errOut := sluiceRun(t, args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "sluice mount: ") || !strings.Contains(errOut, c.want) ||
			!strings.Contains(errOut, "\nusage: sluice mount VOLUME DIR ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", args, code, out, errOut, c.want)
		}
		if _, err := os.Lstat(vol); !os.IsNotExist(err) {
			t.Errorf("%v created %s", args, vol)
		}
	}
}

// TestDocumentedInvocations: every command line in the README and docs
// parses. --help at the end stops each after its flags are parsed (a
// mistake in them is reported instead of the help).
func TestDocumentedInvocations(t *testing.T) {
	for _, line := range []string{
		"mount /tmp/sluice-vol /tmp/sluice-mnt",
		"mount VOL DIR --policy classic --cache-size 1G --metrics localhost:9100 -o allow_other,ro -o noatime --debug",
		"mount VOL DIR --policy concurrent --cache sluice --writeback-cache --strict-dio --max-background 64 --grace 20s --size 8G",
		"mount VOL DIR --size 1G -o ro,noatime",
		"umount DIR --lazy --force --timeout 60s",
		"mkfs VOL --size 16G --block-size 4096 --io-unit 512 --prealloc --data /dev/X --force",
		"mkfs VOL --size 16G --data-checksums",
		"stat VOL --json",
		"fsck VOL --json",
		"fsck VOL --no-data",
		"scrub VOL",
		"scrub VOL --json --rate 100M",
		"bench --quick --only W1,W3 --json F --html F --kernel-peers",
		"bench --smoke --only W3 --fio none --volume DIR --target DIR --target DIR2 --json - --html F --duration 1s --warmup 0s --reps 2 --no-raw --from F",
	} {
		args := append(strings.Fields(line), "--help")
		if code, out, errOut := sluiceRun(t, args...); code != 0 || errOut != "" || !strings.Contains(out, "Usage:") {
			t.Errorf("sluice %s: exit %d, stderr %q", line, code, errOut)
		}
	}
}

// TestMountFlags parses mount's command line without mounting: -o is
// repeatable and comma-separated, and every documented form is taken.
func TestMountFlags(t *testing.T) {
	args := []string{"mount", "VOL", "-o", "allow_other,ro", "DIR", "-o", "noatime", "--options=nodev", "-onosuid",
		"--policy", "classic", "-cache-size", "1G", "--metrics", "localhost:9100", "-debug", "--o", "exec"}
	root := newRootCommand(args, io.Discard, io.Discard)
	argv := goStyleFlags(root, args)
	cmd, rest, err := root.Find(argv)
	if err != nil || cmd.Name() != "mount" {
		t.Fatalf("Find: %v, %v", cmd, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	if pos := cmd.Flags().Args(); !slices.Equal(pos, []string{"VOL", "DIR"}) {
		t.Errorf("positional arguments %q", pos)
	}
	opts := *cmd.Flags().Lookup("options").Value.(*optList)
	if want := []string{"allow_other", "ro", "noatime", "nodev", "nosuid", "exec"}; !slices.Equal(opts, want) {
		t.Errorf("-o: %q, want %q", opts, want)
	}
	for name, want := range map[string]string{"policy": "classic", "cache-size": "1G", "metrics": "localhost:9100", "debug": "true",
		"size": "16G", "cache": "kernel", "grace": "10s"} {
		if got := cmd.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
}

// TestGoStyleFlags: the rewriting of flags the standard flag package took.
func TestGoStyleFlags(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"mount V D -o ro -policy classic", "mount V D -o ro --policy classic"},
		{"mount V D --o ro -oro -o=dev -debug=false", "mount V D -o ro -oro -o=dev --debug=false"},
		{"mount V D -o -policy", "mount V D -o -policy"}, // a value, however odd
		{"bench -duration -1s --warmup -2s -quick", "bench --duration -1s --warmup -2s --quick"},
		{"bench --json - -kernel-peers --fio -quick", "bench --json - --kernel-peers --fio -quick"},
		{"mkfs V -size 4M -- -force", "mkfs V --size 4M -- -force"},
		{"stat -h -help -x -nosuch V", "stat -h --help -x -nosuch V"},
		{"frobnicate -size 4M", "frobnicate -size 4M"},
		{"-size mkfs", "-size mkfs"},
	} {
		args := strings.Fields(c.in)
		if got := strings.Join(goStyleFlags(newRootCommand(args, io.Discard, io.Discard), args), " "); got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
	if got := goStyleFlags(newRootCommand(nil, io.Discard, io.Discard), nil); got == nil {
		t.Error("nil for no arguments: cobra would read os.Args")
	}
}

// TestUnknownFlags: an unknown flag, anywhere on the line, is refused by
// name with the usage line and exit 2; so is an unknown command.
func TestUnknownFlags(t *testing.T) {
	for _, name := range commandNames {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{name, "A", "B", "--no-such-flag"}, "unknown flag: --no-such-flag"},
			{[]string{name, "--no-such-flag=1", "A", "B"}, "unknown flag: --no-such-flag"},
			{[]string{name, "A", "-x", "B"}, "unknown shorthand flag: 'x' in -x"},
		} {
			code, out, errOut := sluiceRun(t, c.args...)
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			if code != 2 || out != "" || len(lines) != 2 || lines[0] != "sluice "+name+": "+c.want ||
				!strings.HasPrefix(lines[1], "usage: sluice "+name) {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2, %q and the usage line", c.args, code, out, errOut, c.want)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-such-flag", "mkfs"}, "sluice: unknown flag: --no-such-flag\n"},
		{[]string{"frobnicate", "--size", "4M"}, `sluice: unknown command "frobnicate"`},
		{[]string{"completion", "bashy"}, `sluice completion: unknown command "bashy"`},
		{[]string{"completion"}, "sluice completion: expected a shell"},
	} {
		code, out, errOut := sluiceRun(t, c.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// TestCompletion: cobra's completion scripts, and the completion of flag
// values.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := sluiceRun(t, "completion", shell)
		if code != 0 || errOut != "" || !strings.Contains(out, "sluice") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", shell, code, errOut, len(out))
		}
	}
	code, out, _ := sluiceRun(t, "__complete", "mount", "V", "D", "--policy", "")
	if code != 0 || !strings.Contains(out, "concurrent\n") || !strings.Contains(out, "classic\n") {
		t.Errorf("completing --policy: exit %d: %q", code, out)
	}
	code, out, _ = sluiceRun(t, "__complete", "m")
	if code != 0 || !strings.Contains(out, "mkfs") || !strings.Contains(out, "mount") {
		t.Errorf("completing a command: exit %d: %q", code, out)
	}
}
