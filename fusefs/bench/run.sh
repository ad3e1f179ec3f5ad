#!/usr/bin/env bash
# fusefs/bench/run.sh: fio on a sluice mount against kernel XFS on a loop
# device and the go-fuse loopback file system, in one run, on the same disk.
#
#   sudo fusefs/bench/run.sh                      # everything, ~15 minutes
#   RUNTIME=5 ROUNDS=1 CASES="rr4k-1 rw4k-1" TARGETS="xfs sluice" fusefs/bench/run.sh
#
# Targets (TARGETS, space-separated):
#   xfs             XFS (mkfs.xfs defaults) on a loop device with direct I/O
#                   (losetup --direct-io=on) over a preallocated image in $WORK
#   sluice          sluice mount of a fresh volume in $WORK ($SLUICE_ARGS
#                   are added to `sluice mount`, e.g. "--cache sluice")
#   sluice2 sluice3 more sluice mounts with $SLUICE2_ARGS and $SLUICE3_ARGS
#                   (to compare options in the same run), and with the binary
#                   $SLUICE2_BIN and $SLUICE3_BIN if set (to compare builds, e.g. one of
#                   the commit before a change: go build -o /tmp/old ./cmd/sluice)
#   sluice-uring sluice-devfuse
#                   sluice mounts ($SLUICE_ARGS too) with --transport uring and
#                   --transport devfuse: the transport dimension, e.g.
#                   TARGETS="xfs sluice-uring sluice-devfuse"
#   loopback-plain  go-fuse's loopback over a directory in $WORK, every open
#                   FOPEN_DIRECT_IO, passthrough off, go-fuse's defaults
#   loopback-tuned  the same with sluice's INIT options (1 MiB MaxWrite,
#                   MaxBackground 128, ASYNC_DIO, HANDLE_KILLPRIV_V2) and
#                   FOPEN_PARALLEL_DIRECT_WRITES on O_DIRECT opens
# Cases (CASES), each on one fully written $SIZE file per target:
#   rr4k-1 rr4k-4   4 KiB O_DIRECT randread, io_uring, iodepth 32, 1 / 4 jobs
#   rw4k-1 rw4k-4   4 KiB O_DIRECT randwrite, io_uring, iodepth 32, 1 / 4 jobs
#   rw512-1         512 B O_DIRECT randrw 50/50, libaio, iodepth 32, 1 job
#   brr4k-cold      4 KiB buffered randread, io_uring, iodepth 32, 1 job,
#                   after dropping the page caches
#   bsr1m bsw1m     1 MiB buffered sequential read (cold) / write (+fsync)
#   brr4k-hot       4 KiB buffered randread, psync, after reading the file
#   brw4k           4 KiB buffered randwrite, psync, fsync at the end
#   fdsw4k odsw4k   4 KiB O_DIRECT randwrite overwrites, psync, 1 job, with
#                   fdatasync after each write / opened O_DSYNC (databases'
#                   logs on preallocated files)
#   utime chmod open stat
#                   one metadata call in a loop by one thread (metaops:
#                   utimensat, chmod, open+close, stat of one file), calls/s
#                   reported as IOPS
#   sqlite          SQLite (Python's sqlite3) in WAL mode with synchronous=FULL:
#                   2,000 transactions of 50 inserts of 100 random bytes into a
#                   new database; commits/s reported as IOPS
#   untar tarc rmrf Go's src tree (GOROOT/src, ~15k entries): extracted with
#                   tar -x, archived with tar -c after dropping the caches,
#                   removed with rm -rf; entries/s reported as IOPS (run
#                   them in this order: tarc and rmrf extract it first,
#                   untimed, if it is not there)
# Every target stays mounted for the whole run and the cases run round by
# round (ROUNDS, default 3), target after target, so that changes in the
# machine's load (it may be shared) hit every target alike; the report is
# the median over the rounds. Output: one line per run (IOPS, MiB/s, the
# daemon's CPU time per I/O), then the medians and the ratios (against the
# first sluice target), in $OUT
# (default $WORK/results.txt); PROFILE=CASE saves a CPU profile of the
# sluice daemon during that case beside it. Everything it mounts and
# creates is removed at the end.
set -euo pipefail

RUNTIME=${RUNTIME:-15}
RAMP=${RAMP:-2}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-2G}
WORK=${WORK:-/var/tmp/sluice-fusefs-bench}
TARGETS=${TARGETS:-"xfs sluice loopback-plain loopback-tuned"}
CASES=${CASES:-"rr4k-1 rr4k-4 rw4k-1 rw4k-4 rw512-1 brr4k-cold"}
SLUICE_ARGS=${SLUICE_ARGS:-}
SLUICE2_ARGS=${SLUICE2_ARGS:-}
SLUICE3_ARGS=${SLUICE3_ARGS:-}
SLUICE2_BIN=${SLUICE2_BIN:-}
SLUICE3_BIN=${SLUICE3_BIN:-}
PROFILE=${PROFILE:-}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$WORK/results.txt}

[ "$(id -u)" = 0 ] || { echo "run as root (mount, losetup, drop_caches)" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio is not installed" >&2; exit 1; }

mkdir -p "$WORK"
BIN=$WORK/bin
mkdir -p "$BIN"
(cd "$REPO" && go build -o "$BIN/sluice" ./cmd/sluice && go build -o "$BIN/loopback" ./fusefs/bench/loopback && go build -o "$BIN/metaops" ./fusefs/bench/metaops)

if [[ " $CASES " =~ \ (untar|tarc|rmrf)\  ]] && [ ! -f "$WORK/src.tar" ]; then
	tar -cf "$WORK/src.tar" -C "$(go env GOROOT)" src
	tar -tf "$WORK/src.tar" | wc -l >"$WORK/src.entries"
fi

declare -A MNT DAEMON
LOOPDEV=
cleanup() {
	set +e
	for t in "${!MNT[@]}"; do
		if mountpoint -q "${MNT[$t]}"; then
			umount "${MNT[$t]}" 2>/dev/null || umount -l "${MNT[$t]}"
		fi
	done
	for t in "${!DAEMON[@]}"; do
		kill "${DAEMON[$t]}" 2>/dev/null
		wait "${DAEMON[$t]}" 2>/dev/null
	done
	[ -n "$LOOPDEV" ] && losetup -d "$LOOPDEV"
	LOOPDEV=
	MNT=()
	DAEMON=()
	rm -rf "$WORK/xfs.img" "$WORK/vol-"* "$WORK/orig-"*
}
trap 'cleanup; rm -rf "$BIN"' EXIT

wait_line() { # file pattern
	for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "timed out waiting for '$2' in $1:" >&2
	cat "$1" >&2
	return 1
}

setup() {
	local t=$1 m=$WORK/mnt-$1 port
	mkdir -p "$m"
	MNT[$t]=$m
	case $t in
	xfs)
		fallocate -l 8G "$WORK/xfs.img"
		LOOPDEV=$(losetup -f --show --direct-io=on "$WORK/xfs.img")
		mkfs.xfs -f -q "$LOOPDEV"
		mount "$LOOPDEV" "$m"
		;;
	sluice | sluice2 | sluice3 | sluice-uring | sluice-devfuse)
		local args=$SLUICE_ARGS bin=$BIN/sluice
		port=9188
		if [ "$t" = sluice2 ]; then args=$SLUICE2_ARGS port=9189 bin=${SLUICE2_BIN:-$BIN/sluice}; fi
		if [ "$t" = sluice3 ]; then args=$SLUICE3_ARGS port=9190 bin=${SLUICE3_BIN:-$BIN/sluice}; fi
		if [ "$t" = sluice-uring ]; then args="$SLUICE_ARGS --transport uring" port=9191; fi
		if [ "$t" = sluice-devfuse ]; then args="$SLUICE_ARGS --transport devfuse" port=9192; fi
		# shellcheck disable=SC2086
		"$bin" mount "$WORK/vol-$t" "$m" --size 8G --metrics 127.0.0.1:$port $args >"$WORK/$t.out" 2>"$WORK/$t.err" &
		DAEMON[$t]=$!
		wait_line "$WORK/$t.out" '^mounted'
		;;
	loopback-plain | loopback-tuned)
		mkdir -p "$WORK/orig-$t"
		local flag=
		[ "$t" = loopback-tuned ] && flag=-tuned
		"$BIN/loopback" $flag "$m" "$WORK/orig-$t" >"$WORK/$t.out" 2>"$WORK/$t.err" &
		DAEMON[$t]=$!
		wait_line "$WORK/$t.out" '^mounted'
		;;
	*)
		echo "unknown target $t" >&2
		exit 1
		;;
	esac
	# The file every case uses: written in full, so reads find data and
	# writes overwrite allocated blocks.
	fio --name=fill --filename="$m/bench.dat" --size="$SIZE" --rw=write --bs=1m --direct=1 \
		--ioengine=libaio --iodepth=4 --end_fsync=1 --output=/dev/null
}

fio_case() { # case mountpoint -> fio arguments
	local common="--filename=$2/bench.dat --size=$SIZE --time_based --runtime=$RUNTIME --ramp_time=$RAMP --group_reporting --norandommap --randrepeat=0"
	case $1 in
	rr4k-1) echo "$common --rw=randread --bs=4k --direct=1 --ioengine=io_uring --iodepth=32 --numjobs=1" ;;
	rr4k-4) echo "$common --rw=randread --bs=4k --direct=1 --ioengine=io_uring --iodepth=32 --numjobs=4" ;;
	rw4k-1) echo "$common --rw=randwrite --bs=4k --direct=1 --ioengine=io_uring --iodepth=32 --numjobs=1" ;;
	rw4k-4) echo "$common --rw=randwrite --bs=4k --direct=1 --ioengine=io_uring --iodepth=32 --numjobs=4" ;;
	rw512-1) echo "$common --rw=randrw --bs=512 --direct=1 --ioengine=libaio --iodepth=32 --numjobs=1" ;;
	brr4k-cold) echo "$common --rw=randread --bs=4k --direct=0 --ioengine=io_uring --iodepth=32 --numjobs=1" ;;
	bsr1m) echo "$common --rw=read --bs=1m --direct=0 --ioengine=psync --numjobs=1" ;;
	bsw1m) echo "$common --rw=write --bs=1m --direct=0 --ioengine=psync --numjobs=1 --end_fsync=1" ;;
	brr4k-hot) echo "$common --rw=randread --bs=4k --direct=0 --ioengine=psync --numjobs=1 --invalidate=0" ;;
	brw4k) echo "$common --rw=randwrite --bs=4k --direct=0 --ioengine=psync --numjobs=1 --end_fsync=1" ;;
	fdsw4k) echo "$common --rw=randwrite --bs=4k --direct=1 --ioengine=psync --numjobs=1 --fdatasync=1" ;;
	odsw4k) echo "$common --rw=randwrite --bs=4k --direct=1 --ioengine=psync --numjobs=1 --sync=dsync" ;;
	*)
		echo "unknown case $1" >&2
		exit 1
		;;
	esac
}

cpu_ticks() { # pid -> utime+stime in clock ticks
	if [ -n "$1" ]; then awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; else echo 0; fi
}

tree_case() { # case mountpoint -> fio-like JSON: entries/s as IOPS, and the seconds
	local t0 t1
	if [ "$1" != untar ] && [ ! -d "$2/tree" ]; then
		mkdir -p "$2/tree" && tar -xf "$WORK/src.tar" -C "$2/tree"
	fi
	drop_caches
	t0=$(date +%s.%N)
	case $1 in
	untar)
		rm -rf "$2/tree" && mkdir -p "$2/tree"
		t0=$(date +%s.%N)
		tar -xf "$WORK/src.tar" -C "$2/tree"
		;;
	tarc) tar -cf - -C "$2/tree" . | cat >/dev/null ;; # not to /dev/null: GNU tar would read nothing
	rmrf) rm -rf "$2/tree" ;;
	esac
	t1=$(date +%s.%N)
	python3 -c 'import json, sys; n, s = int(sys.argv[1]), float(sys.argv[2]) - float(sys.argv[3]); print(json.dumps({"seconds": s, "jobs": [{"read": {"iops": 0, "bw_bytes": 0}, "write": {"iops": n / s, "bw_bytes": 0}}]}))' \
		"$(cat "$WORK/src.entries")" "$t1" "$t0"
}

sqlite_case() { # mountpoint -> fio-like JSON: commits/s as IOPS, and the seconds
	python3 - "$1/bench.sqlite" <<'PY'
import json, os, sqlite3, sys, time
db, n = sys.argv[1], 2000
for suffix in ("", "-wal", "-shm"):
    if os.path.exists(db + suffix):
        os.remove(db + suffix)
con = sqlite3.connect(db, isolation_level=None)
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA synchronous=FULL")
con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
t0 = time.time()
for _ in range(n):
    con.execute("BEGIN")
    for _ in range(50):
        con.execute("INSERT INTO t(v) VALUES (randomblob(100))")
    con.execute("COMMIT")
s = time.time() - t0
con.close()
print(json.dumps({"seconds": s, "jobs": [{"read": {"iops": 0, "bw_bytes": 0}, "write": {"iops": n / s, "bw_bytes": 0}}]}))
PY
}

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

summarise_run() { # json target case ticks round
	python3 - "$@" "$(getconf CLK_TCK)" "$RUNTIME" "$RAMP" <<'PY'
import json, sys
path, t, c, ticks, r, hz, runtime, ramp = sys.argv[1:]
out = json.load(open(path))
j = out["jobs"][0]
iops = j["read"]["iops"] + j["write"]["iops"]
mibs = (j["read"]["bw_bytes"] + j["write"]["bw_bytes"]) / 2**20
ios = iops * out.get("seconds", float(runtime) + float(ramp))
cpu = int(ticks) / int(hz)
us = cpu / ios * 1e6 if ios and int(ticks) else 0
print(f"{t:16} {c:11} round={r} iops={iops:10.0f} MiB/s={mibs:8.1f} daemon_cpu_us_per_io={us:6.1f}")
PY
}

: >"$OUT"
echo "# $(date -u +%FT%TZ) $(uname -r) nproc=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg) runtime=${RUNTIME}s rounds=$ROUNDS size=$SIZE sluice_args='$SLUICE_ARGS' sluice2_args='$SLUICE2_ARGS' sluice3_args='$SLUICE3_ARGS'" | tee -a "$OUT"
for t in $TARGETS; do
	setup "$t"
done
for r in $(seq "$ROUNDS"); do
	for c in $CASES; do
		for t in $TARGETS; do
			m=${MNT[$t]}
			pid=${DAEMON[$t]:-}
			case $c in
			brr4k-cold | bsr1m) drop_caches ;;
			brr4k-hot) cat "$m/bench.dat" >/dev/null ;;
			esac
			args=
			case $c in utime | chmod | open | stat | untar | tarc | rmrf | sqlite) ;; *) args=$(fio_case "$c" "$m") ;; esac
			before=$(cpu_ticks "$pid")
			prof=
			if [ "$PROFILE" = "$c" ] && [ "$t" = sluice ] && [ "$r" = 1 ]; then
				(sleep "$RAMP" && curl -s -o "$WORK/cpu-$c.pprof" "http://127.0.0.1:9188/debug/pprof/profile?seconds=$((RUNTIME - 1))") &
				prof=$!
			fi
			case $c in
			utime | chmod | open | stat)
				"$BIN/metaops" -op "$c" -seconds "$RUNTIME" "$m" >"$WORK/$t-$c.json"
				;;
			untar | tarc | rmrf)
				tree_case "$c" "$m" >"$WORK/$t-$c.json"
				;;
			sqlite)
				sqlite_case "$m" >"$WORK/$t-$c.json"
				;;
			*)
				# shellcheck disable=SC2086
				fio --name="$c" $args --output-format=json --output="$WORK/$t-$c.json"
				;;
			esac
			after=$(cpu_ticks "$pid")
			if [ -n "$prof" ]; then
				wait "$prof" && cp "$WORK/cpu-$c.pprof" "${OUT%.txt}-cpu-$c.pprof"
			fi
			summarise_run "$WORK/$t-$c.json" "$t" "$c" "$((after - before))" "$r" >>"$OUT"
			tail -1 "$OUT"
		done
	done
done
cleanup

python3 - "$OUT" <<'PY' | tee -a "$OUT"
import sys, collections, statistics
runs = collections.defaultdict(lambda: collections.defaultdict(list))
cpu = collections.defaultdict(lambda: collections.defaultdict(list))
targets = []
for line in open(sys.argv[1]):
    if line.startswith("#") or "iops=" not in line:
        continue
    f = line.split()
    runs[f[1]][f[0]].append(float(line.split("iops=")[1].split()[0]))
    cpu[f[1]][f[0]].append(float(line.split("daemon_cpu_us_per_io=")[1].split()[0]))
    if f[0] not in targets:
        targets.append(f[0])
med = {c: {t: statistics.median(v) for t, v in ts.items()} for c, ts in runs.items()}
print("# median IOPS over the rounds (median daemon CPU per I/O)")
print(f"{'case':11} " + " ".join(f"{t:>24}" for t in targets))
for c in med:
    cells = []
    for t in targets:
        if t in med[c]:
            cells.append(f"{med[c][t]:>11.0f} ({statistics.median(cpu[c][t]):5.1f} us)")
        else:
            cells.append(f"{'-':>24}")
    print(f"{c:11} " + " ".join(cells))
# Ratios against the first sluice target of the run (sluice, or
# sluice-uring when the run compares transports).
base = next((t for t in targets if t.startswith("sluice")), None)
print(f"# ratios of median IOPS ({base} / each other target)")
for c in med:
    s = med[c].get(base)
    if not s:
        continue
    parts = [f"{base}/{t}={s / med[c][t]:5.2f}" for t in targets if t != base and med[c].get(t)]
    print(f"{c:11} " + " ".join(parts))
PY
