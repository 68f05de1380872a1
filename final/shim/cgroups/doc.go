// SPDX-License-Identifier: Apache-2.0

// Package cgroups finds a container's memory cgroup, reads the kernel's count of OOM kills in
// it on either cgroup layout, and watches every container of the shim for OOM kills with one
// goroutine.
//
// It mirrors containerd v2.4 pkg/oom (v1: an eventfd per cgroup registered through
// cgroup.event_control on memory.oom_control, in one epoll set; v2: the memory.events file)
// and the cgroup lookups of cmd/containerd-shim-runc-v2/task/service.go. Unlike containerd, a
// notification is only a hint: the oom_kill counter decides whether there was a kill, so a
// kill is reported once however many paths notice it, and v2 cgroups share the v1 epoll set
// through one inotify descriptor instead of a goroutine per container.
package cgroups
