#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every fuzz target of the module for DURATION each (a go test -fuzztime value: 30s, 2m,
# 1000x). `make test` runs only their seed corpora; this is the long run `make soak` calls.
# An input that fails is written to the package's testdata/fuzz/<Target>/, to be kept as a
# regression seed once the bug is fixed. Run as root: FuzzTaskService drives real runc.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:?usage: scripts/fuzz.sh DURATION (e.g. 2m)}
GO=${GO:-go}

failed=()
# "path/to/pkg_test.go:func FuzzName(" for every fuzz target outside exercise copies.
while IFS=: read -r file line; do
	name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$line")
	pkg=./$(dirname "$file")
	echo "== $name ($pkg) for $duration"
	if ! $GO test -run '^$' -fuzz "^${name}\$" -fuzztime "$duration" "$pkg"; then
		failed+=("$name")
	fi
done < <(git ls-files '*_test.go' | grep -v '^work/' | xargs grep -H '^func Fuzz[A-Za-z0-9_]*(f \*testing.F)' | sort)

if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: every target ran $duration without a failure"
