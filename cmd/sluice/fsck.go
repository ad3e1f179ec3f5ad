package main

import (
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
	var asJSON bool
	var ef etcdFlags
	cmd := &cobra.Command{
		Use:   "fsck VOLUME [--json]",
		Short: "check its consistency (exit 1: problems, 8: cannot check)",
		Long: `Open VOLUME read-only and check the consistency of its metadata, without changing
it: records that do not decode, extents against each other and free space,
directory entries, link counts, sizes. The report goes to stdout; orphans (inodes unlinked while open) are listed but are not
problems. The volume must not be in use (mounted).

Exit status, as e2fsck's: 0 clean; 1 problems found (listed on stdout, their
kinds on stderr); 8 the check could not run (the volume cannot be opened or read).`,
		Args: wantArgs(1, "one VOLUME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFsck(args[0], asJSON, &ef, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	addEtcdFlags(cmd.Flags(), &ef, false)
	return cmd
}

// fsckJSON is the --json output of fsck.
type fsckJSON struct {
	Volume string `json:"volume"`
	UUID   string `json:"uuid"`
	Clean  bool   `json:"clean"`
	*sluice.CheckReport
}

// runFsck opens the volume read-only and runs sluice.CheckVolume. The
// report goes to stdout; a volume with problems also gets one line on
// stderr naming their kinds, and exit status 1. Orphans are listed but are
// not problems.
func runFsck(dir string, asJSON bool, ef *etcdFlags, stdout io.Writer) error {
	v, err := openVolumeReadOnly(dir, ef)
	if err != nil {
		return &exitError{fsckOperational, err}
	}
	defer v.Close()
	r, err := sluice.CheckVolume(v)
	if err != nil {
		return &exitError{fsckOperational, fmt.Errorf("volume %s: reading the metadata: %w", dir, err)}
	}
	if r.Problems == nil {
		r.Problems = []sluice.Problem{}
	}
	if r.Orphans == nil {
		r.Orphans = []meta.Ino{}
	}
	uuid := volume.UUIDString(v.Header.UUID)

	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(fsckJSON{Volume: dir, UUID: uuid, Clean: r.Clean(), CheckReport: r}); err != nil {
			return err
		}
	} else {
		printCheckReport(stdout, dir, uuid, r)
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

func printCheckReport(w io.Writer, dir, uuid string, r *sluice.CheckReport) {
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
