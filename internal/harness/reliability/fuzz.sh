#!/usr/bin/env bash
# Runs every fuzz target of internal/harness/reliability for a while, one after
# the other (go test -fuzz takes one target per run). CI runs the committed seed
# corpora (testdata/fuzz) as ordinary tests; this script is for longer runs:
#
#   internal/harness/reliability/fuzz.sh                # 30s per target
#   FUZZTIME=10m internal/harness/reliability/fuzz.sh
#   internal/harness/reliability/fuzz.sh 2m FuzzPaths FuzzCorruptVolume
#   FUZZFLAGS="-parallel 4" internal/harness/reliability/fuzz.sh 5m
#
# A failing input is written to testdata/fuzz/<Target>/ by go test; commit it
# with the fix so it stays a regression test. New interesting inputs stay in
# the Go build cache ($(go env GOCACHE)/fuzz).
#
# Go 1.26's fuzz coordinator can end a duration-bounded run with a bare
# "context deadline exceeded" and no failing input (golang/go#75804, fixed
# in Go 1.27). A failed run counts as a failure only if it wrote a new input
# to testdata/fuzz/<Target>/; otherwise it is reported as that flake.
set -euo pipefail
cd "$(dirname "$0")"
time="${1:-${FUZZTIME:-30s}}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	mapfile -t targets < <(grep -ho '^func Fuzz[A-Za-z0-9_]*' ./*_test.go | sed 's/^func //' | sort)
fi
failed=()
for t in "${targets[@]}"; do
	echo "== $t ($time)"
	dir="testdata/fuzz/$t"
	before=$(ls "$dir" 2>/dev/null | sort || true)
	# shellcheck disable=SC2086 # FUZZFLAGS is a list of flags
	if go test -run '^$' -fuzz "^${t}\$" -fuzztime "$time" ${FUZZFLAGS:-} .; then
		continue
	fi
	after=$(ls "$dir" 2>/dev/null | sort || true)
	if [ "$before" != "$after" ]; then
		failed+=("$t")
	else
		echo "$t: go test failed without writing a failing input: golang/go#75804, ignored"
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "failing inputs written for: ${failed[*]}"
	exit 1
fi
