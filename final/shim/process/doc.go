// SPDX-License-Identifier: Apache-2.0

// Package process drives a container's processes through the runc CLI: the init process (from
// the rootfs mounts and runc create to runc delete) and exec processes, each behind a state
// machine (created, running, paused, stopped, deleted) that refuses illegal transitions with
// errdefs.ErrFailedPrecondition rather than reaching runc with them.
//
// It mirrors containerd v2.4 cmd/containerd-shim-runc-v2/process (init.go, init_state.go,
// exec.go, exec_state.go) and runc/container.go (NewContainer, the rootfs mounts). Unlike
// containerd, one mutex-guarded status per process replaces the state objects: the rules of
// every state are one table per kind of process (state.go), which each operation consults.
// The exit of a process lives in one place, a channel closed on exit, that every Wait sleeps
// on. init.go holds the init's life cycle, exec.go the exec's, process.go what both share,
// state.go the state machine, runtime.go the runc CLI, runcerror.go what runc's failures mean,
// forcedelete.go the delete action's runc side, mount.go the rootfs mounts, killall.go what
// an init's exit leaves to kill, stats.go and oom.go the cgroup's metrics and OOM kills, and
// options.go with runcconfig.go the options of the requests.
package process
