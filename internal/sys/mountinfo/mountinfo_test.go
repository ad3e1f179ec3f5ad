package mountinfo

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// sample is a mountinfo with a FUSE mount on a path with a space, two
// mounts stacked on one point, a mount hidden under a later one, and a
// bind mount.
const sample = `1 0 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
30 1 0:40 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw,size=1024k
31 30 0:41 / /tmp/my\040mnt rw,nosuid,nodev,noatime - fuse.sluice /var/lib/a\040vol rw,user_id=0,group_id=0,default_permissions,allow_other
40 30 0:50 / /tmp/stack rw - tmpfs below rw
41 30 0:51 / /tmp/stack rw - tmpfs above rw
50 30 0:60 / /tmp/hidden rw - tmpfs parent rw
51 50 0:61 / /tmp/hidden/deep rw - tmpfs deep rw
52 30 0:62 / /tmp/hidden rw - tmpfs cover rw
60 1 254:0 /srv/data /data rw,relatime master:3 - ext4 /dev/vda rw
`

func sampleTable(t *testing.T) Table {
	t.Helper()
	tab, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestParse(t *testing.T) {
	tab := sampleTable(t)
	if len(tab) != 10 {
		t.Fatalf("%d mounts, want 10", len(tab))
	}
	want := Mount{
		ID: 31, ParentID: 30, Major: 0, Minor: 41, Root: "/", Point: "/tmp/my mnt",
		Options: "rw,nosuid,nodev,noatime", FSType: "fuse.sluice", Source: "/var/lib/a vol",
		SuperOptions: "rw,user_id=0,group_id=0,default_permissions,allow_other",
	}
	if !reflect.DeepEqual(tab[3], want) {
		t.Errorf("FUSE line:\n got %+v\nwant %+v", tab[3], want)
	}
	if got := tab[0].Optional; !reflect.DeepEqual(got, []string{"shared:1"}) {
		t.Errorf("optional fields %q", got)
	}
	if m := tab[9]; m.Root != "/srv/data" || m.Point != "/data" || m.Major != 254 {
		t.Errorf("bind mount %+v", m)
	}
}

func TestParseRejectsMalformed(t *testing.T) {
	for _, line := range []string{
		"1 0 254:0 / / rw",                    // no separator
		"x 0 254:0 / / rw - ext4 /dev/vda rw", // bad ID
		"1 0 254 / / rw - ext4 /dev/vda rw",   // bad device number
		"1 0 254:0 / / rw - ext4",             // no source
	} {
		if _, err := Parse(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("%q parsed", line)
		}
	}
}

func TestOption(t *testing.T) {
	m := sampleTable(t)[3]
	for _, c := range []struct {
		name, val string
		ok        bool
	}{
		{"noatime", "", true},     // per mount
		{"allow_other", "", true}, // per superblock
		{"user_id", "0", true},    // with a value
		{"noexec", "", false},     // absent
		{"default", "", false},    // a prefix of an option is not the option
	} {
		if v, ok := m.Option(c.name); v != c.val || ok != c.ok {
			t.Errorf("Option(%q) = %q, %v; want %q, %v", c.name, v, ok, c.val, c.ok)
		}
	}
	if !m.HasOption("default_permissions") || m.HasOption("ro") {
		t.Error("HasOption")
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:         "/plain",
		`/a\040b`:        "/a b",
		`/tab\011nl\012`: "/tab\tnl\n",
		`/back\134slash`: `/back\slash`,
		`/not\09octal`:   `/not\09octal`,
		`/short\04`:      `/short\04`,
		`\040\040`:       "  ",
		`/trailing\`:     `/trailing\`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAt(t *testing.T) {
	tab := sampleTable(t)
	for dir, want := range map[string]string{
		"/tmp/my mnt":  "/var/lib/a vol",
		"/tmp/my mnt/": "/var/lib/a vol", // cleaned
		"/tmp/stack":   "above",          // the later of two on one point
		"/tmp/hidden":  "cover",
		"/":            "/dev/vda",
	} {
		if m, ok := tab.At(dir); !ok || m.Source != want {
			t.Errorf("At(%q) = %q, %v; want %q", dir, m.Source, ok, want)
		}
	}
	for _, dir := range []string{"/tmp/my", "/tmp/hidden/deep", "tmp", "/nowhere"} {
		if m, ok := tab.At(dir); ok {
			t.Errorf("At(%q) = %+v, want none", dir, m)
		}
	}
}

func TestContaining(t *testing.T) {
	tab := sampleTable(t)
	for path, want := range map[string]string{
		"/tmp/my mnt/db/file": "/tmp/my mnt",
		"/tmp/my mnt":         "/tmp/my mnt",
		"/tmp/my":             "/tmp", // a name prefix is not a parent
		"/tmp/hidden/deep/x":  "/tmp/hidden",
		"/data/x":             "/data",
		"/etc/passwd":         "/",
		"/proc/../etc":        "/",
	} {
		if m, ok := tab.Containing(path); !ok || m.Point != want {
			t.Errorf("Containing(%q) = %q, %v; want %q", path, m.Point, ok, want)
		}
	}
	if m, _ := tab.Containing("/tmp/hidden/deep/x"); m.Source != "cover" {
		t.Errorf("Containing under a covered mount: %q, want the cover", m.Source)
	}
	if m, _ := tab.Containing("/tmp/stack/f"); m.Source != "above" {
		t.Errorf("Containing on stacked mounts: %q, want the top one", m.Source)
	}
	if _, ok := tab.Containing("relative"); ok {
		t.Error("a relative path matched")
	}
}

// TestReadSelf: this process's own table has a root and holds the test's
// temporary directory on the device stat reports for it.
func TestReadSelf(t *testing.T) {
	tab, err := Read()
	if err != nil {
		t.Skipf("no %s here: %v", Path, err)
	}
	if _, ok := tab.Containing("/"); !ok {
		t.Fatal("no mount holds /")
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, ok := tab.Containing(dir)
	if !ok {
		t.Fatalf("no mount holds %s", dir)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if unix.Major(st.Dev) != m.Major || unix.Minor(st.Dev) != m.Minor {
		t.Errorf("%s: mount %s is %d:%d, stat says %d:%d", dir, m.Point, m.Major, m.Minor, unix.Major(st.Dev), unix.Minor(st.Dev))
	}
	if _, err := os.Stat(m.Point); err != nil {
		t.Error(err)
	}
}
