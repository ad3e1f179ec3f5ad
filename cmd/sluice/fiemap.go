package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice"
)

func newFiemapCommand() *cobra.Command {
	var asJSON bool
	var ef etcdFlags
	cmd := &cobra.Command{
		Use:   "fiemap VOLUME PATH [--json]",
		Short: "list a file's extents (FIEMAP), offline",
		Long: `Open VOLUME read-only and list the extents of the file PATH (a path inside the
volume, from its root) as FS_IOC_FIEMAP reports them on XFS: byte offsets in the
file and on the data device, length, and the flags unwritten (preallocated),
shared (reflinked blocks) and last. The kernel's FUSE never forwards FIEMAP, so
filefrag and xfs_io fiemap fail on a mount; this is the offline equivalent. The
volume must not be in use (mounted).`,
		Args: wantArgs(2, "a VOLUME and a PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFiemap(args[0], args[1], asJSON, &ef, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	addEtcdFlags(cmd.Flags(), &ef, false)
	return cmd
}

// fiemapExtentJSON is one extent of fiemap --json.
type fiemapExtentJSON struct {
	Logical  uint64   `json:"logical"`
	Physical uint64   `json:"physical"`
	Length   uint64   `json:"length"`
	Flags    uint32   `json:"flags"`
	Names    []string `json:"flag_names"`
}

func runFiemap(dir, path string, asJSON bool, ef *etcdFlags, stdout io.Writer) error {
	v, err := openVolumeReadOnly(dir, ef)
	if err != nil {
		return err
	}
	defer v.Close()
	fs, err := sluice.OpenVolume(v, &sluice.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("volume %s: %w", dir, err)
	}
	defer fs.Close()
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	f, err := fs.OpenFile(path, sluice.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("volume %s: %w", dir, err)
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		return fmt.Errorf("volume %s: %w", dir, err)
	}
	exts, err := f.Fiemap(0, 1<<63-1, 0)
	if err != nil {
		return fmt.Errorf("volume %s: %w", dir, err)
	}
	out := make([]fiemapExtentJSON, len(exts))
	for i, x := range exts {
		out[i] = fiemapExtentJSON{x.Logical, x.Physical, x.Length, x.Flags, fiemapFlagNames(x.Flags)}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Path    string             `json:"path"`
			Size    int64              `json:"size"`
			Extents []fiemapExtentJSON `json:"extents"`
		}{path, a.Size, out})
	}
	fmt.Fprintf(stdout, "%s: %d %s, size %d\n", path, len(exts), pickPlural(len(exts), "extent", "extents"), a.Size)
	if len(exts) > 0 {
		fmt.Fprintf(stdout, "%4s %20s %20s %16s  %s\n", "ext", "logical", "physical", "length", "flags")
	}
	for i, x := range out {
		fmt.Fprintf(stdout, "%4d %20d %20d %16d  %s\n", i, x.Logical, x.Physical, x.Length, strings.Join(x.Names, ","))
	}
	return nil
}

// fiemapFlagNames names the FIEMAP extent flags set in f, as filefrag does.
func fiemapFlagNames(f uint32) []string {
	names := []string{}
	for _, n := range []struct {
		bit  uint32
		name string
	}{
		{sluice.FiemapExtentUnknown, "unknown_loc"},
		{sluice.FiemapExtentDelalloc, "delalloc"},
		{sluice.FiemapExtentUnwritten, "unwritten"},
		{sluice.FiemapExtentShared, "shared"},
		{sluice.FiemapExtentLast, "last"},
	} {
		if f&n.bit != 0 {
			names = append(names, n.name)
		}
	}
	return names
}
