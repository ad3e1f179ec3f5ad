package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/directdev"
	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/volume"
)

func newStatCommand() *cobra.Command {
	var asJSON bool
	var ef etcdFlags
	cmd := &cobra.Command{
		Use:   "stat VOLUME [--json]",
		Short: "show the header and space usage",
		Long: `Open VOLUME read-only and show its header (UUID, format, geometry), its data
device and how it is driven, and its space and inode usage. A volume on the
embedded Pebble store must not be in use (mounted). For a volume whose metadata
is in etcd, which may be mounted meanwhile (by this host or another), it also
shows each etcd endpoint's health and the host that owns the volume, if any.`,
		Args: wantArgs(1, "one VOLUME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStat(args[0], asJSON, &ef, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	addEtcdFlags(cmd.Flags(), &ef, false)
	return cmd
}

// statJSON is the --json output of stat: volume.Info plus the byte counts
// and the data device's path, so that a script need not multiply blocks,
// and the untorn writes the volume takes (sluice.AtomicWriteLimitsOf; the
// library and the ring take them, a FUSE mount does not).
type statJSON struct {
	*volume.Info
	DataPath               string `json:"data_path"`
	DataBytes              uint64 `json:"data_bytes"`
	UsedBytes              uint64 `json:"used_bytes"`
	FreeBytes              uint64 `json:"free_bytes"`
	AtomicWriteUnitMin     int64  `json:"atomic_write_unit_min"`
	AtomicWriteUnitMax     int64  `json:"atomic_write_unit_max"`
	AtomicWriteSegmentsMax int64  `json:"atomic_write_segments_max"`
}

// runStat opens the volume read-only and prints its header and space
// usage: one "key value" line each, sizes in bytes and IEC units.
func runStat(dir string, asJSON bool, ef *etcdFlags, stdout io.Writer) error {
	v, err := openVolume(dir, ef, true)
	if err != nil {
		return err
	}
	defer v.Close()
	in, err := v.Stat()
	if err != nil {
		return fmt.Errorf("volume %s: reading the metadata: %w", dir, err)
	}
	if in.Etcd, err = v.EtcdStatus(); err != nil {
		return fmt.Errorf("volume %s: reading its owner: %w", dir, err)
	}
	describeDevice(v, in)
	bs := uint64(in.BlockSize)
	aw := sluice.AtomicWriteLimitsOf(int64(in.BlockSize))
	out := statJSON{
		Info:                   in,
		DataPath:               dataDevicePath(dir),
		DataBytes:              in.DataBlocks * bs,
		UsedBytes:              in.UsedBlocks * bs,
		FreeBytes:              in.FreeBlocks * bs,
		AtomicWriteUnitMin:     aw.UnitMin,
		AtomicWriteUnitMax:     aw.UnitMax,
		AtomicWriteSegmentsMax: aw.SegmentsMax,
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	line := func(k, format string, a ...any) {
		fmt.Fprintf(stdout, "%-12s %s\n", k, fmt.Sprintf(format, a...))
	}
	line("volume", "%s", dir)
	line("uuid", "%s", in.UUID)
	line("format", "%d", in.Format)
	line("block size", "%s", bytesIEC(uint64(in.BlockSize)))
	line("I/O unit", "%s", bytesIEC(uint64(in.IOUnit)))
	line("device", "%s, %s, %s", out.DataPath, bytesIEC(in.DeviceBytes), deviceKind(dir))
	line("I/O", "%s", ioMode(in))
	if in.DataChecksums {
		line("checksums", "data: yes (CRC-32C of every file block, verified on every read; sluice scrub checks them all)")
	} else {
		line("checksums", "data: no (sluice mkfs --data-checksums makes a volume with them)")
	}
	line("atomic", "writes of %s to %s, %d %s (library and ring API; not through FUSE)",
		unitsIEC(uint64(aw.UnitMin)), unitsIEC(uint64(aw.UnitMax)), aw.SegmentsMax, pickPlural(int(aw.SegmentsMax), "segment", "segments"))
	if in.MetaURL != "" {
		line("metadata", "etcd %s", in.MetaURL)
		for _, ep := range in.Etcd.Endpoints {
			line("etcd", "%s", endpointLine(&ep))
		}
		if h := in.Etcd.Owner; h != nil {
			line("owner", "%s, lease %x, %v left", h, h.Lease, h.TTLLeft)
		} else {
			line("owner", "none (not mounted)")
		}
		line("reservation", "%s", in.Etcd.Reservation)
	} else {
		line("metadata", "pebble %s", filepath.Join(dir, "meta"))
	}
	line("blocks", "%d total: header in [0, %d), data in [%d, %d)", in.TotalBlocks, in.DataStart, in.DataStart, in.TotalBlocks)
	line("data", "%d blocks, %s", in.DataBlocks, bytesIEC(out.DataBytes))
	line("used", "%d blocks, %s (%s)", in.UsedBlocks, bytesIEC(out.UsedBytes), in.UsedFraction)
	line("free", "%d blocks, %s in %d %s", in.FreeBlocks, bytesIEC(out.FreeBytes), in.FreeExtents, pickPlural(in.FreeExtents, "extent", "extents"))
	line("shared", "%d blocks, %s (reflink copies save %s)", in.SharedBlocks, bytesIEC(in.SharedBlocks*bs), bytesIEC(in.SavedBlocks*bs))
	if in.StagingBlocks > 0 {
		line("staging", "%d blocks (copy-on-write blocks a crash left; freed at the next read-write open)", in.StagingBlocks)
	}
	line("inodes", "%d", in.Inodes)
	line("orphans", "%d", in.Orphans)
	return nil
}

// endpointLine describes one etcd member's status: "URL healthy, leader,
// etcd 3.7.3, 1.2 ms" or "URL unhealthy: why".
func endpointLine(ep *etcdkv.EndpointStatus) string {
	took := fmt.Sprintf("%.1f ms", float64(ep.Took.Microseconds())/1000)
	if !ep.Healthy {
		return fmt.Sprintf("%s unhealthy: %s (%s)", ep.Endpoint, ep.Error, took)
	}
	role := ""
	if ep.Leader {
		role = ", leader"
	}
	return fmt.Sprintf("%s healthy%s, etcd %s, raft term %d, %s", ep.Endpoint, role, ep.Version, ep.RaftTerm, took)
}

// openVolumeReadOnly opens a volume for fsck and fiemap, turning the
// refusals of volume.Open into one-line messages that say what to do. A
// volume in etcd that a host owns (mounted) is refused, as one on Pebble
// that a process holds.
func openVolumeReadOnly(dir string, ef *etcdFlags) (*volume.Volume, error) {
	return openVolume(dir, ef, false)
}

// openVolume opens a volume read-only; shared lets it open a volume in etcd
// that a host owns (stat, which changes nothing and reads one consistent
// state per record kind).
func openVolume(dir string, ef *etcdFlags, shared bool) (*volume.Volume, error) {
	eo, err := ef.options()
	if err != nil {
		return nil, err
	}
	v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true, Shared: shared, Etcd: eo})
	if err != nil {
		return nil, volumeOpenError(dir, err)
	}
	return v, nil
}

// volumeOpenError adds advice to the errors of volume.Open and volume.Mkfs
// that carry a sentinel; the others already say what is wrong.
func volumeOpenError(dir string, err error) error {
	switch {
	case errors.Is(err, volume.ErrInUse):
		// "volume DIR is in use by pid N: volume in use": drop the
		// sentinel's redundant text.
		msg := strings.TrimSuffix(err.Error(), ": "+volume.ErrInUse.Error())
		var iu *volume.InUseError
		if errors.As(err, &iu) && iu.Host != "" {
			return fmt.Errorf("%s; unmount it first (a mount with --standby waits for it instead)", msg)
		}
		return fmt.Errorf("%s; unmount it or stop that process first", msg)
	case errors.Is(err, volume.ErrBadHeader):
		return fmt.Errorf("%w; restore %s from a backup, or recreate the volume with: sluice mkfs %s --size SIZE --force (this erases it)",
			err, dataDevicePath(dir), dir)
	case errors.Is(err, directdev.ErrNoDirectIO):
		return fmt.Errorf("volume %s: %w", dir, err)
	}
	return err
}

// describeDevice fills in the fields of in that volume.Stat leaves to the
// caller because they depend on how the device was opened.
func describeDevice(v *volume.Volume, in *volume.Info) {
	if d, ok := v.Dev.(*directdev.Device); ok { // read-only opens: never fenced
		in.DataBackend = d.Backend().String()
		in.DirectIO = d.Direct()
	}
	if in.DataBlocks > 0 {
		in.UsedFraction = fmt.Sprintf("%.1f%%", 100*float64(in.UsedBlocks)/float64(in.DataBlocks))
	}
}

// ioMode describes how the data device is driven, e.g. "O_DIRECT, io_uring".
func ioMode(in *volume.Info) string {
	mode := "buffered (no O_DIRECT)"
	if in.DirectIO {
		mode = "O_DIRECT"
	}
	switch in.DataBackend {
	case "uring":
		return mode + ", io_uring"
	case "pread":
		return mode + ", pread/pwrite (io_uring unavailable)"
	case "":
		return mode
	}
	return mode + ", " + in.DataBackend
}

// dataDevicePath is VOLUME/data, or the block device it links to.
func dataDevicePath(dir string) string {
	p := filepath.Join(dir, "data")
	if t, err := os.Readlink(p); err == nil {
		return t
	}
	return p
}

// deviceKind says whether the data device is a block device or an image
// file, and how much of an image is allocated.
func deviceKind(dir string) string {
	fi, err := os.Stat(filepath.Join(dir, "data"))
	if err != nil {
		return "unknown"
	}
	if fi.Mode()&os.ModeDevice != 0 {
		return "block device"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		allocated := uint64(st.Blocks) * 512
		if allocated < uint64(fi.Size()) {
			return "sparse image file, " + unitsIEC(allocated) + " allocated"
		}
	}
	return "image file"
}

// bytesIEC formats n as "N B" or "N B (x.y KiB/MiB/...)".
func bytesIEC(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d B (%s)", n, unitsIEC(n))
}

// unitsIEC formats n in the largest IEC unit it reaches: "512 B", "4 KiB",
// "1.5 GiB".
func unitsIEC(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(1024), 0
	for n/div >= 1024 && exp < len(units)-1 {
		div *= 1024
		exp++
	}
	if n%div == 0 {
		return fmt.Sprintf("%d %ciB", n/div, units[exp])
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), units[exp])
}

func pickPlural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
