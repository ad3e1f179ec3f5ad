package sluice

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicefs/sluice/volume"
)

// TestOptionsReportDeviceOptions: Options.Device reaches the data device
// Open opens, and FS.Options reports the device's effective options (the
// I/O unit from the volume header, directdev's defaults filled), not the
// value given.
func TestOptionsReportDeviceOptions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := volume.Mkfs(dir, volume.MkfsOptions{Size: 4 << 20, IOUnit: 4096,
		Device: volume.DeviceOptions{AllowBuffered: true}}); err != nil {
		t.Fatal(err)
	}
	// AllowBuffered: t.TempDir may be on a file system without O_DIRECT.
	fs, err := Open(dir, &Options{Device: volume.DeviceOptions{AllowBuffered: true, PreadWorkers: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	want := volume.DeviceOptions{IOUnit: 4096, AllowBuffered: true, PreadWorkers: 3}
	want.EnsureDefaults()
	o := fs.Options()
	if o.Device != want {
		t.Errorf("Options().Device = %v, want %v", o.Device, want)
	}
	if s := o.String(); !strings.Contains(s, "device={"+want.String()+"}") {
		t.Errorf("Options().String() = %q, want it to hold the device options %q", s, want.String())
	}
}
