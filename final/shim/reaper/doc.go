// SPDX-License-Identifier: Apache-2.0

// Package reaper makes the shim the parent of its containers and collects every exit.
//
// It mirrors containerd v2.4 pkg/sys/reaper (Reap, Monitor) and the SIGCHLD handling of
// pkg/shim/shim_unix.go. Unlike containerd, the exit of a command started through the reaper
// (runc, a logging binary) goes straight to the caller that started it, through a pid table
// filled while the fork holds the reaper's lock, instead of being broadcast to every
// subscriber; and subscribers get unbounded mailboxes, so the reap loop never blocks.
package reaper
