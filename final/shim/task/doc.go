// SPDX-License-Identifier: Apache-2.0

// Package task is the Task service a shim serves to containerd: it validates requests, finds
// the container and process they name, calls package process, and publishes the task events.
// It also turns reaped pids into process exits, in the order containerd needs them.
//
// It mirrors containerd v2.4 cmd/containerd-shim-runc-v2/task/service.go (the RPCs, preStart and
// handleStarted for early exits, processExits, handleInitExit with its pending execs and the
// kill of what an init without its own PID namespace leaves, handleProcessExit) and
// runc/container.go (a container with its init and execs). One service serves every container
// of a shim, so that containers grouped into one shim share it.
//
// service.go holds the service and its configuration, containers.go the container table and
// the lookup, lifecycle.go the RPCs that add and remove processes (Create, Exec, Start,
// Delete), control.go the RPCs on a process that exists, and exits.go the order in which
// exits become TaskExit events.
package task
