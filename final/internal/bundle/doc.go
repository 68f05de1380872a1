// SPDX-License-Identifier: Apache-2.0

// Package bundle is everything the shim, its delete action, the driver and the tests know
// about the files of a bundle directory: their names, their formats, and how each is read and
// written safely. A new file in the bundle, or a change of one's format, goes here.
//
// A bundle holds, by who writes each file and who reads it (containerd v2.4.2 source of the
// same in parentheses):
//
//	config.json       containerd (the driver) writes the OCI spec; runc reads it; the start
//	                  action reads its annotations to find a container's group, Create checks it
//	                  before writing anything, the init's exit reads its PID namespace
//	                  (ReadAnnotations, Check, ReadSpec; manager_linux.go readSpec,
//	                  runc/util.go ShouldKillAllOnExit)
//	rootfs            containerd makes the directory; Create mounts the task's rootfs on it; the
//	                  delete action unmounts it (runc/container.go NewContainer; manager Stop)
//	address           the start action writes the shim's socket address; the delete action reads
//	                  it to remove a dead shim's socket, and a caller that finds no
//	                  bootstrap.json falls back to it (pkg/shim/util.go ReadAddress;
//	                  core/runtime/v2/shim_manager.go restoreBootstrapParams)
//	shim.pid          the start action writes the long-lived shim's pid; the driver and the tests
//	                  read it (the helper pkg/shim/util.go WritePidFile; v2.4's runc shim no
//	                  longer writes the file)
//	init.pid          runc writes the init's pid (--pid-file); the shim reads it after create,
//	                  the delete action when the shim is gone (process/utils.go InitPidFile;
//	                  manager Stop)
//	exec-<id>.pid     runc writes an exec's pid; the shim reads and removes it (process/exec.go,
//	                  which names it <id>.pid: see ExecPidFile for why this one does not)
//	exit.json         the shim records the init's exit; the delete action reports it when the
//	                  shim is gone (runc/util.go WriteExitStatus, ReadExitStatus; the format is
//	                  private to the shim and differs from the reference's)
//	options.json      Create records the runtime options; the delete action reads them to drive
//	                  the same runc binary and root (runc/container.go WriteOptions, ReadOptions)
//	log.json          runc's log, made a regular file of the bundle's by the shim before runc
//	                  first runs; the shim reads runc's errors from it (process/init.go)
//	bootstrap.json    the caller of start (containerd, the driver) records the start reply to
//	                  find the shim again (core/runtime/v2 writeBootstrapParams,
//	                  restoreBootstrapParams)
//	shim-binary-path  the caller records which shim binary started the shim, for the delete
//	                  action (core/runtime/v2/binary.go, shim_load.go)
//	log               containerd's FIFO, which the shim logs to (core/runtime/v2/shim_unix.go
//	                  openShimLog; pkg/shim/shim_unix.go openLog)
//	shim.log          the shim's log when nobody reads the FIFO (shimwalk's own)
//
// Every file the shim writes is written atomically and never through a symlink (fsutil); the
// spec is read bounded (MaxSpecSize), non-blocking and never through a symlink, and what the
// request got wrong is refused with InvalidArgument, a failure of the host's is not.
//
// Options is the type options.json stores: the file's format is decided here, next to its
// reader and writer, and the process package, which turns the options into a runc command line,
// uses the type without knowing the file. Bootstrap is likewise the start reply's JSON, which
// the shim prints and the driver keeps as bootstrap.json.
//
// The package is internal to final/: the steps' shims are self-contained and spell their own
// names, and code outside final/ (the steps' tests, bench, tools) reads a bundle through the
// driver and testkit.
package bundle
