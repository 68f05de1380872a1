#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Lists, for each file name found in several steps, which steps hold byte-identical copies.
# A fix made to one copy belongs in all of them ("a fix travels both ways", docs/architecture.md).
set -euo pipefail
cd "$(dirname "$0")/.."
for name in $(find steps -mindepth 2 -maxdepth 2 -type f -printf '%f\n' | sort -u); do
	groups=$(for f in steps/*/"$name"; do [ -f "$f" ] && printf '%s %s\n' "$(sha256sum <"$f" | cut -c1-12)" "$(basename "$(dirname "$f")" | cut -c1-2)"; done |
		sort | awk '{ a[$1] = a[$1] (a[$1] ? "," : "") $2; n[$1]++ } END { for (h in a) if (n[h] > 1) print a[h] }' | sort)
	[ -n "$groups" ] && printf '%-20s same in steps %s\n' "$name" "$(echo $groups | tr ' ' ';')"
done
true
