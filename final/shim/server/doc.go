// SPDX-License-Identifier: Apache-2.0

// Package server is the long-lived shim: it takes the socket from fd 3, becomes a subreaper,
// serves the Task service over ttrpc as both containerd.task.v2.Task and
// containerd.task.v3.Task, forwards events, shuts down cleanly on Shutdown or SIGTERM, and logs
// every goroutine's stack (and their count) on SIGUSR1.
//
// It mirrors containerd v2.4 pkg/shim/shim.go (run, serve) and pkg/shim/shim_unix.go
// (serveListener, setupSignals, openLog), without the plugin registry: the shim has exactly one
// service, wired by hand.
package server
