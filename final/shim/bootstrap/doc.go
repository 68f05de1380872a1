// SPDX-License-Identifier: Apache-2.0

// Package bootstrap is the shim binary's command line: the start action (the short-lived helper
// that binds the socket and re-executes the shim), the delete action (cleanup after a shim that
// died), -v and -info, and the dispatch to the long-lived server.
//
// It speaks both bootstrap generations: containerd up to 2.2 sends the runtime options as an Any
// on stdin and reads the address back bare (1.6) or as JSON (1.7 to 2.2, which set
// MAX_SHIM_VERSION); containerd 2.3 and later send a bootstrap.v1.BootstrapParams and read a
// BootstrapResult. It mirrors containerd v2.4 pkg/shim/shim.go (flags, run) and
// cmd/containerd-shim-runc-v2/manager/manager_linux.go (Start with its grouping, Stop).
//
// It is the edge of the shim: the only package that reads the environment (SHIMWALK_SOCKET_DIR,
// SHIMWALK_RUNC_ROOT, MAX_SHIM_VERSION, TTRPC_ADDRESS, SCHED_CORE). What the packages below need
// of it, it passes down in their configuration.
//
// main.go holds the flags, the dispatch and that configuration, start.go the start action,
// delete.go the delete action and info.go -info.
package bootstrap
