// SPDX-License-Identifier: Apache-2.0

// Package stdio wires a container process's standard streams to what containerd asked for:
// FIFOs, a logging binary (binary://), a file (file://), /dev/null, or a terminal through
// runc's console socket.
//
// It mirrors containerd v2.4 cmd/containerd-shim-runc-v2/process/io.go (createIO, copyPipes,
// NewBinaryIO) and the console handling of cmd/containerd-shim-runc-v2/runc/platform.go
// (CopyConsole through one epoll instance, ShutdownConsole at the process's exit). Unlike
// containerd, output FIFOs are opened read-write, which needs neither a second open of the
// FIFO nor a goroutine blocked in open(2).
package stdio
