#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds containerd releases (containerd, ctr, containerd-shim-runc-v2) from the Go module proxy
# into a cache outside the repository, so tests can run the shims under every bootstrap generation
# an operator runs: Debian ships only 1.6, and the module proxy is the one source reachable
# everywhere we run. With no argument it builds every version of CONTAINERD_VERSIONS; with
# arguments, those versions. Safe to run again: with the binaries in place it only says so.
# final/driver reads both lists below and looks for the binaries in the same place.
set -euo pipefail

# The matrix final/e2e runs beside Debian's 1.6: the newest release of each line the module proxy
# serves (`go list -m -versions github.com/containerd/containerd` for 1.7,
# `.../containerd/v2` for 2.x). 1.7 and 2.2 speak the JSON bootstrap reply, 2.4 the protobuf one.
CONTAINERD_VERSIONS=(v1.7.35 v2.2.9 v2.4.2)

# The 2.x the rest of the tests and the benchmark run against.
CONTAINERD2_VERSION=v2.4.2

cache_root=${SHIMWALK_CACHE:-/var/cache/shimwalk}
cmds=(containerd ctr containerd-shim-runc-v2)

# Built as containerd's Makefile builds a release: stripped (-s -w), and the shim without cgo
# (SHIM_CGO_ENABLED ?= 0), so that the benchmark compares the final shim with the reference shim
# operators actually run, not a larger debug build of it.
# containerd and ctr take go build's default, which is without cgo where no C compiler is
# installed (Debian's base system has none).
cgo_of() { [[ $1 == containerd-shim-runc-v2 ]] && echo 0 || go env CGO_ENABLED; }
flags_of() { echo "CGO_ENABLED=$(cgo_of "$1") -tags urfave_cli_no_docs -ldflags=-s -w"; }

# build VERSION builds one release into $cache_root/containerd-VERSION/{src,bin}.
build() {
	local version=$1
	local cache=$cache_root/containerd-$version
	local src=$cache/src bin=$cache/bin
	# containerd 1.x is the module github.com/containerd/containerd, 2.x is .../v2.
	local module=github.com/containerd/containerd
	case $version in
	v1.*) ;;
	v2.*) module=$module/v2 ;;
	*)
		echo "containerd2: $version is no containerd version this script builds (v1.x or v2.x)" >&2
		return 1
		;;
	esac

	if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w $cache ]]; then
		echo "containerd2: cannot write $cache; run as root or set SHIMWALK_CACHE" >&2
		return 1
	fi
	# Two runs on one machine (parallel CI jobs) would build into the same files; the second
	# waits and then finds the binaries built. The lock is per version, so the subshell that
	# holds it also scopes the descriptor.
	(
		exec 9>"$cache/.lock"
		flock 9

		# A binary counts as built only with the flags it was built with recorded beside it and
		# equal to today's, so that a change of flags rebuilds it on machines that cached an
		# older build.
		fresh() {
			[[ -x $bin/$1 && -f $bin/.$1.flags && $(<"$bin/.$1.flags") == "$(flags_of "$1")" ]]
		}
		built() {
			local c
			for c in "${cmds[@]}"; do
				fresh "$c" || return 1
			done
			"$bin/containerd" --version >/dev/null 2>&1
		}
		if built; then
			echo "containerd2: containerd $version is built in $bin"
			exit 0
		fi

		# The scratch module lives in the cache, never in the repository: its go.mod must not
		# become a nested module of shimwalk, and nothing of it is to be committed.
		echo "containerd2: building containerd $version in $src (a few minutes, once per machine)"
		mkdir -p "$src" "$bin"
		cd "$src"
		# A go.work or a GOFLAGS=-mod=... of the caller's must not reach this module.
		export GOWORK=off GOFLAGS=-buildvcs=false
		[[ -f go.mod ]] || go mod init shimwalk.local/containerd2
		cat >tools.go <<GO
//go:build tools

// Package tools names the containerd commands this scratch module builds, so that go mod tidy
// keeps their dependencies.
package tools

import (
	_ "$module/cmd/containerd"
	_ "$module/cmd/containerd-shim-runc-v2"
	_ "$module/cmd/ctr"
)
GO
		t0=$SECONDS
		echo "containerd2: go get $module@$version"
		go get "$module@$version"
		echo "containerd2: go mod tidy"
		go mod tidy
		echo "containerd2: modules resolved in $((SECONDS - t0))s"
		for c in "${cmds[@]}"; do
			fresh "$c" && continue
			t1=$SECONDS
			# urfave_cli_no_docs leaves out the man-page generator, as containerd's own Makefile
			# does. The binary is built under a temporary name so that an interrupted build
			# never looks done.
			CGO_ENABLED=$(cgo_of "$c") go build -tags urfave_cli_no_docs -ldflags='-s -w' \
				-o "$bin/$c.tmp" "$module/cmd/$c"
			mv "$bin/$c.tmp" "$bin/$c"
			flags_of "$c" >"$bin/.$c.flags"
			echo "containerd2: built $bin/$c in $((SECONDS - t1))s"
		done
		echo "containerd2: $("$bin/containerd" --version) built in $((SECONDS - t0))s"
	)
}

versions=("$@")
((${#versions[@]})) || versions=("${CONTAINERD_VERSIONS[@]}")
for v in "${versions[@]}"; do
	build "$v"
done
