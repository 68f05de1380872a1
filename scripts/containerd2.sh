#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds containerd 2.x (containerd, ctr, containerd-shim-runc-v2) from the Go module proxy into a
# cache outside the repository, so tests can run the shims under containerd 2.x beside Debian's
# 1.6: Debian ships no 2.x, and the module proxy is the one source reachable everywhere we run.
# Safe to run again: with the binaries in place it only says so. final/driver/testkit reads the
# version below and looks for the binaries in the same place.
set -euo pipefail

CONTAINERD2_VERSION=v2.4.2

cache=${SHIMWALK_CACHE:-/var/cache/shimwalk}/containerd-$CONTAINERD2_VERSION
src=$cache/src
bin=$cache/bin
cmds=(containerd ctr containerd-shim-runc-v2)

if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w $cache ]]; then
	echo "containerd2: cannot write $cache; run as root or set SHIMWALK_CACHE" >&2
	exit 1
fi
# Two runs on one machine (parallel CI jobs) would build into the same files; the second waits
# and then finds the binaries built.
exec 9>"$cache/.lock"
flock 9

# Built as containerd's Makefile builds a release: stripped (-s -w), and the shim without cgo
# (SHIM_CGO_ENABLED ?= 0), so that the benchmark compares the final shim with the reference shim
# operators actually run, not a larger debug build of it.
# containerd and ctr take go build's default, which is without cgo where no C compiler is
# installed (Debian's base system has none).
cgo_of() { [[ $1 == containerd-shim-runc-v2 ]] && echo 0 || go env CGO_ENABLED; }
flags_of() { echo "CGO_ENABLED=$(cgo_of "$1") -tags urfave_cli_no_docs -ldflags=-s -w"; }

# A binary counts as built only with the flags it was built with recorded beside it and equal to
# today's, so that a change of flags rebuilds it on machines that cached an older build.
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
	echo "containerd2: containerd $CONTAINERD2_VERSION is built in $bin"
	exit 0
fi

# The scratch module lives in the cache, never in the repository: its go.mod must not become a
# nested module of shimwalk, and nothing of it is to be committed.
echo "containerd2: building containerd $CONTAINERD2_VERSION in $src (a few minutes, once per machine)"
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
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
GO
t0=$SECONDS
echo "containerd2: go get github.com/containerd/containerd/v2@$CONTAINERD2_VERSION"
go get "github.com/containerd/containerd/v2@$CONTAINERD2_VERSION"
echo "containerd2: go mod tidy"
go mod tidy
echo "containerd2: modules resolved in $((SECONDS - t0))s"
for c in "${cmds[@]}"; do
	fresh "$c" && continue
	t1=$SECONDS
	# urfave_cli_no_docs leaves out the man-page generator, as containerd's own Makefile does.
	# The binary is built under a temporary name so that an interrupted build never looks done.
	CGO_ENABLED=$(cgo_of "$c") go build -tags urfave_cli_no_docs -ldflags='-s -w' \
		-o "$bin/$c.tmp" "github.com/containerd/containerd/v2/cmd/$c"
	mv "$bin/$c.tmp" "$bin/$c"
	flags_of "$c" >"$bin/.$c.flags"
	echo "containerd2: built $bin/$c in $((SECONDS - t1))s"
done
echo "containerd2: $("$bin/containerd" --version)"
