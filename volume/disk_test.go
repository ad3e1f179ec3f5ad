package volume

import (
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/meta"
)

// TestOpenReportsDeviceOptions: a volume directory's data device is opened
// with the I/O unit its header names and the read-only flag of Open, over the
// caller's other options, and Volume.DeviceOptions reports them with
// directdev's defaults filled in.
func TestOpenReportsDeviceOptions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	// AllowBuffered: t.TempDir may be on a file system without O_DIRECT.
	dev := DeviceOptions{AllowBuffered: true, PreadWorkers: 3}
	if err := Mkfs(dir, MkfsOptions{Size: 4 << 20, IOUnit: 4096, Device: dev}); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		v, err := Open(dir, OpenOptions{ReadOnly: ro, Device: dev})
		if err != nil {
			t.Fatal(err)
		}
		got, ok := v.DeviceOptions()
		want := DeviceOptions{IOUnit: 4096, AllowBuffered: true, PreadWorkers: 3, ReadOnly: ro}
		want.EnsureDefaults()
		if !ok || got != want {
			t.Errorf("ReadOnly=%t: DeviceOptions() = %v, %t; want %v, true", ro, got, ok, want)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAttachedDeviceHasNoDeviceOptions: a volume attached from parts (a
// memory device here) has no directdev options to report.
func TestAttachedDeviceHasNoDeviceOptions(t *testing.T) {
	dev, err := memdev.New(4<<20, memdev.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	kv, err := meta.OpenPebble("meta", meta.PebbleOptions{FS: vfs.NewMem(), CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	if _, err := Format(dev, kv, FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := Attach(dev, kv)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := v.DeviceOptions(); ok || got != (DeviceOptions{}) {
		t.Errorf("DeviceOptions() = %v, %t; want the zero value, false", got, ok)
	}
}
