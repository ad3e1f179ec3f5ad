package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/volume"
)

// fsck exit statuses, as e2fsck's: 0 clean, 1 problems found (listed on
// stdout), 8 the check could not run (the volume cannot be opened or read).
const (
	fsckProblems    = 1
	fsckOperational = 8
)

// fsckProblemLimit is the most problems sluice.CheckVolume records.
const fsckProblemLimit = 1000

func newFsckCommand() *cobra.Command {
	var asJSON, noData bool
	var ef etcdFlags
	cmd := &cobra.Command{
		Use:   "fsck VOLUME [--json] [--no-data]",
		Short: "check its consistency (exit 1: problems, 8: cannot check)",
		Long: `Open VOLUME read-only and check the consistency of its metadata, without changing
it: records that do not decode, extents against each other and free space,
directory entries, link counts, sizes. The report goes to stdout; orphans (inodes unlinked while open) are listed but are not
problems. The volume must not be in use (mounted).

On a volume with data checksums (sluice mkfs --data-checksums) it then reads
every written block of every file and verifies it, as sluice scrub does: each
damaged block is a problem of kind data-checksum, naming the file, the offset
and the device block. --no-data checks the metadata only.

Exit status, as e2fsck's: 0 clean; 1 problems found (listed on stdout, their
kinds on stderr); 8 the check could not run (the volume cannot be opened or read).`,
		Args: wantArgs(1, "one VOLUME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFsck(args[0], asJSON, noData, &ef, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&noData, "no-data", false, "check the metadata only: do not read and verify the data of a volume with data checksums")
	addEtcdFlags(cmd.Flags(), &ef, false)
	return cmd
}

// fsckJSON is the --json output of fsck.
type fsckJSON struct {
	Volume string `json:"volume"`
	UUID   string `json:"uuid"`
	Clean  bool   `json:"clean"`
	*sluice.CheckReport
	// DataScrub is the scrub of a volume with data checksums (without
	// --no-data); its damaged blocks are also among the problems.
	DataScrub *sluice.ScrubReport `json:"data_scrub,omitempty"`
	// DataScrubError says why the data could not be scrubbed, when the
	// metadata had problems (otherwise fsck exits 8).
	DataScrubError string `json:"data_scrub_error,omitempty"`
}

// fsckData is fsck's data scrub of a volume with data checksums.
type fsckData struct {
	checksums bool                // the volume has data checksums
	skipped   bool                // --no-data
	report    *sluice.ScrubReport // nil if skipped or it failed
	err       error               // why it failed
}

// runFsck opens the volume read-only and runs sluice.CheckVolume, then,
// on a volume with data checksums and unless noData, scrubs its data. The
// report goes to stdout; a volume with problems (damaged blocks are
// problems of kind data-checksum) also gets one line on stderr naming
// their kinds, and exit status 1. Orphans are listed but are not problems.
func runFsck(dir string, asJSON, noData bool, ef *etcdFlags, stdout io.Writer) error {
	v, err := openVolumeReadOnly(dir, ef)
	if err != nil {
		return &exitError{fsckOperational, err}
	}
	defer v.Close()
	r, err := sluice.CheckVolume(v)
	if err != nil {
		return &exitError{fsckOperational, fmt.Errorf("volume %s: reading the metadata: %w", dir, err)}
	}
	data := fsckData{checksums: v.Super.Features&meta.FeatureDataChecksums != 0, skipped: noData}
	if data.checksums && !noData {
		// A scrub that cannot run over metadata with problems is noted
		// with them; over clean metadata it is fsck's failure.
		data.report, data.err = scrubVolume(context.Background(), v, 0)
		if data.err != nil && r.Clean() {
			return &exitError{fsckOperational, fmt.Errorf("volume %s: scrubbing the data: %w", dir, data.err)}
		}
		if data.err != nil {
			data.report = nil // partial
		}
		if data.report != nil {
			for _, d := range data.report.Damaged {
				for _, b := range d.Blocks {
					if len(r.Problems) < fsckProblemLimit {
						r.Problems = append(r.Problems, sluice.Problem{Kind: "data-checksum", Detail: damageDetail(d.Path, b)})
					}
				}
			}
			if data.report.Damaged == nil {
				data.report.Damaged = []sluice.DamagedFile{}
			}
		}
	}
	if r.Problems == nil {
		r.Problems = []sluice.Problem{}
	}
	if r.Orphans == nil {
		r.Orphans = []meta.Ino{}
	}
	uuid := volume.UUIDString(v.Header.UUID)

	if asJSON {
		out := fsckJSON{Volume: dir, UUID: uuid, Clean: r.Clean(), CheckReport: r, DataScrub: data.report}
		if data.err != nil {
			out.DataScrubError = data.err.Error()
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		printCheckReport(stdout, dir, uuid, r, &data)
	}
	if r.Clean() {
		return nil
	}
	more := ""
	if len(r.Problems) >= fsckProblemLimit {
		more = " or more"
	}
	return &exitError{fsckProblems, fmt.Errorf("volume %s has %d%s %s (%s), listed on stdout; restore it from a backup or copy out what is readable",
		dir, len(r.Problems), more, pickPlural(len(r.Problems), "problem", "problems"), strings.Join(problemKinds(r), ", "))}
}

func printCheckReport(w io.Writer, dir, uuid string, r *sluice.CheckReport, data *fsckData) {
	status := "clean"
	if !r.Clean() {
		status = fmt.Sprintf("%d %s", len(r.Problems), pickPlural(len(r.Problems), "problem", "problems"))
		if len(r.Problems) >= fsckProblemLimit {
			status = fmt.Sprintf("at least %d problems (only the first %d are listed)", len(r.Problems), len(r.Problems))
		}
	}
	fmt.Fprintf(w, "volume %s (uuid %s): %s\n", dir, uuid, status)
	fmt.Fprintf(w, "  inodes   %d (%d %s, %d %s), %d %s\n", r.Inodes,
		r.Directories, pickPlural(r.Directories, "directory", "directories"),
		r.Files, pickPlural(r.Files, "file", "files"),
		r.Extents, pickPlural(r.Extents, "extent", "extents"))
	fmt.Fprintf(w, "  blocks   %d data: %d used, %d free, %d shared\n", r.DataBlocks, r.UsedBlocks, r.FreeBlocks, r.SharedBlocks)
	if r.StagingBlocks > 0 {
		fmt.Fprintf(w, "  staging  %d blocks (copy-on-write blocks a crash left; freed at the next read-write open, not a problem)\n", r.StagingBlocks)
	}
	if len(r.Orphans) == 0 {
		fmt.Fprintf(w, "  orphans  none\n")
	} else {
		inos := make([]string, len(r.Orphans))
		for i, ino := range r.Orphans {
			inos[i] = fmt.Sprint(ino)
		}
		fmt.Fprintf(w, "  orphans  %s (unlinked while open; freed at the next read-write open, not a problem)\n", strings.Join(inos, " "))
	}
	if data.checksums {
		switch d := data.report; {
		case data.skipped:
			fmt.Fprintf(w, "  data     not verified (--no-data)\n")
		case data.err != nil:
			fmt.Fprintf(w, "  data     not verified: %s\n", oneLine(data.err))
		default:
			fmt.Fprintf(w, "  data     %d blocks of %d %s verified against their checksums, %s in %s\n",
				d.Blocks, d.Files, pickPlural(d.Files, "file", "files"), bytesIEC(uint64(d.Bytes)), elapsedRate(d.Elapsed, d.Bytes))
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem  %s\n", p)
	}
}

// problemKinds lists the distinct kinds of r's problems in the order they
// were found.
func problemKinds(r *sluice.CheckReport) []string {
	var kinds []string
	seen := map[string]bool{}
	for _, p := range r.Problems {
		if !seen[p.Kind] {
			seen[p.Kind] = true
			kinds = append(kinds, p.Kind)
		}
	}
	return kinds
}
