package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/volume"
)

func newScrubCommand() *cobra.Command {
	var f scrubFlags
	cmd := &cobra.Command{
		Use:   "scrub VOLUME [--json] [--rate RATE]",
		Short: "read and verify every written block (exit 1: damage, 8: cannot scrub)",
		Long: `Read every written block of every file of VOLUME, straight from its data device,
and verify it against its data checksum (a volume made with sluice mkfs
--data-checksums), without changing anything. The report goes to stdout: how
many files, blocks and bytes were read and how long it took, and each damaged
file by path with the offsets of its damaged blocks and where they are on the
data device.

A volume that is not in use is scrubbed offline, here, with no rate limit
unless --rate is given. A mounted volume is scrubbed online, by its sluice
mount, which sluice scrub asks through the control socket VOLUME/control
(root's for a mount made by root); the mount keeps serving, and the scrub reads
at most 64 MiB/s unless --rate is given (a volume whose metadata is in etcd is
scrubbed on the host that mounts it). A volume without data checksums has
nothing to verify: sluice scrub says so on stderr and exits 0.

Exit status, as fsck's: 0 clean (or nothing to verify); 1 damaged blocks found
(listed on stdout, the number of files on stderr); 8 the scrub could not run.`,
		Example: `  sluice scrub /var/lib/vol
  sluice scrub /var/lib/vol --rate 200M --json`,
		Args: wantArgs(1, "one VOLUME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runScrub(cmd.Context(), args[0], &f, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fl.StringVar(&f.rate, "rate", "", "read at most `RATE` bytes a second (100M, 1G; 0: no limit); default: no limit offline, 64M through a mount")
	addEtcdFlags(fl, &f.etcd, false)
	return cmd
}

// scrubFlags are the flags of scrub.
type scrubFlags struct {
	asJSON bool
	rate   string
	etcd   etcdFlags
}

// scrubJSON is the --json output of scrub.
type scrubJSON struct {
	Volume string `json:"volume"`
	Online bool   `json:"online"` // through the mount's control socket
	// RateBytesPerSecond is the cap on the scrub's reads; 0: none.
	RateBytesPerSecond int64 `json:"rate_bytes_per_second"`
	Clean              bool  `json:"clean"`
	*sluice.ScrubReport
}

// scrubRun says where a scrub ran: offline, or through the mount of the
// process holding the volume.
type scrubRun struct {
	online bool
	holder *volume.InUseError // the mount's process, online
	rate   int64              // bytes per second; 0: no limit
}

// runScrub scrubs the volume in dir: offline if it is not in use, through
// its mount's control socket if it is. It exits 0 clean (or without data
// checksums), 1 with damage, 8 if the scrub could not run.
func runScrub(ctx context.Context, dir string, f *scrubFlags, stdout io.Writer) error {
	rate, err := parseRate(f.rate)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	eo, err := f.etcd.options()
	if err != nil {
		return err
	}
	var rep *sluice.ScrubReport
	run := scrubRun{rate: rate}
	// As openVolumeReadOnly, keeping volume.Open's error to tell a mount
	// apart.
	v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true, Etcd: eo})
	var iu *volume.InUseError
	switch {
	case errors.As(err, &iu):
		run.online, run.holder = true, iu
		if f.rate == "" {
			run.rate = defaultOnlineScrubRate
		}
		rep, err = scrubOnline(ctx, dir, iu, run.rate)
	case err != nil:
		return &exitError{fsckOperational, volumeOpenError(dir, err)}
	default:
		rep, err = scrubVolume(ctx, v, run.rate)
		v.Close()
		if err != nil {
			err = fmt.Errorf("volume %s: %w", dir, err)
		}
	}
	if err != nil {
		return &exitError{fsckOperational, err}
	}
	if rep.Damaged == nil {
		rep.Damaged = []sluice.DamagedFile{}
	}

	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(scrubJSON{Volume: dir, Online: run.online, RateBytesPerSecond: run.rate, Clean: rep.Clean(), ScrubReport: rep}); err != nil {
			return err
		}
	} else if rep.DataChecksums {
		printScrubReport(stdout, dir, &run, rep)
	}
	if !rep.DataChecksums {
		return &exitError{0, fmt.Errorf("volume %s has no data checksums (sluice mkfs --data-checksums): nothing to verify", dir)}
	}
	if rep.Clean() {
		return nil
	}
	blocks := 0
	for _, d := range rep.Damaged {
		blocks += len(d.Blocks)
	}
	return &exitError{fsckProblems, fmt.Errorf("volume %s has %d damaged %s (%d %s), listed on stdout; reading them fails with EIO where they are damaged: restore them from a backup",
		dir, len(rep.Damaged), pickPlural(len(rep.Damaged), "file", "files"), blocks, pickPlural(blocks, "block", "blocks"))}
}

// parseRate parses --rate: bytes a second with an optional K, M, G or T
// suffix (and an optional "/s"); "" and 0 mean no limit.
func parseRate(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := volume.ParseSize(strings.TrimSuffix(strings.TrimSpace(s), "/s"))
	if err != nil {
		return 0, &usageError{"--rate: " + err.Error()}
	}
	return n, nil
}

// scrubVolume starts the engine read-only on v, which it leaves open, and
// scrubs it, reading at most rate bytes a second (0: no limit).
func scrubVolume(ctx context.Context, v *volume.Volume, rate int64) (*sluice.ScrubReport, error) {
	fs, err := sluice.OpenVolume(v, &sluice.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	rep, err := fs.Scrub(ctx, sluice.ScrubOptions{BytesPerSecond: rate})
	if cerr := fs.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return rep, err
}

// scrubOnline asks the mount of the volume in dir, held by iu's process,
// to scrub it, through its control socket (control.go).
func scrubOnline(ctx context.Context, dir string, iu *volume.InUseError, rate int64) (*sluice.ScrubReport, error) {
	path := controlSocketPath(dir)
	held := iu.Error() // "volume DIR is in use by pid N..."
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	url := "http://sluice/scrub?rate=" + strconv.FormatInt(rate, 10)
	resp, err := client.Post(url, "", nil)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT):
			where := "stop that process and scrub it offline"
			if host, _ := os.Hostname(); iu.Host != "" && iu.Host != host {
				where = "run sluice scrub on host " + iu.Host
			}
			return nil, fmt.Errorf("%s, and its control socket %s is missing: only a running sluice mount serves one; %s", held, path, where)
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("%s, but nothing answers on its control socket %s (left by a mount that died?): stop that process and scrub it offline", held, path)
		case errors.Is(err, syscall.EACCES):
			return nil, fmt.Errorf("%s: its control socket %s is only for the user who mounted it (root, for a mount made by root)", held, path)
		}
		return nil, fmt.Errorf("%s: asking its mount to scrub it through %s: %w", held, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s: its mount could not scrub it: %s (%s)", held, strings.TrimSpace(string(msg)), resp.Status)
	}
	var rep sluice.ScrubReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return nil, fmt.Errorf("%s: reading its mount's scrub report: %w", held, err)
	}
	return &rep, nil
}

// printScrubReport prints a scrub's report: one line of status, then one
// "key value" line each, and one line per damaged block.
func printScrubReport(w io.Writer, dir string, run *scrubRun, r *sluice.ScrubReport) {
	status := "clean"
	if !r.Clean() {
		status = fmt.Sprintf("%d damaged %s", len(r.Damaged), pickPlural(len(r.Damaged), "file", "files"))
	}
	fmt.Fprintf(w, "volume %s: %s\n", dir, status)
	how := "offline"
	if run.online {
		how = "online, by the mount of pid " + run.holder.Pid
		if run.holder.Mount != "" {
			how += " on " + run.holder.Mount
		}
	}
	limit := "no rate limit"
	if run.rate > 0 {
		limit = "at most " + unitsIEC(uint64(run.rate)) + "/s"
	}
	fmt.Fprintf(w, "  scrub    %s, %s\n", how, limit)
	fmt.Fprintf(w, "  files    %d\n", r.Files)
	fmt.Fprintf(w, "  blocks   %d read and verified, %s\n", r.Blocks, bytesIEC(uint64(r.Bytes)))
	fmt.Fprintf(w, "  elapsed  %s\n", elapsedRate(r.Elapsed, r.Bytes))
	for _, d := range r.Damaged {
		for _, b := range d.Blocks {
			fmt.Fprintf(w, "  damaged  %s\n", damageDetail(d.Path, b))
		}
	}
}

// damageDetail describes one damaged block of the file at path.
func damageDetail(path string, b sluice.DamagedSpan) string {
	why := "its data does not match its checksum"
	if b.Missing {
		why = "no checksum is recorded for it"
	}
	return fmt.Sprintf("%s offset %d (device block %d): %s", path, b.Offset, b.DeviceBlock, why)
}

// elapsedRate formats a duration and the rate of n bytes in it:
// "1.234s (12.5 MiB/s)".
func elapsedRate(d time.Duration, n int64) string {
	s := d.Round(time.Microsecond).String()
	if d >= time.Millisecond {
		s = d.Round(time.Millisecond).String()
	}
	if d <= 0 || n == 0 {
		return s
	}
	return fmt.Sprintf("%s (%s/s)", s, unitsIEC(uint64(float64(n)/d.Seconds())))
}
