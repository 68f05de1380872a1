// SPDX-License-Identifier: Apache-2.0

// Package cgroups is what the shim knows of cgroups, on either layout: it finds a container's
// cgroup and reads its metrics, moves the shim into the ShimCgroup, reads the kernel's count of
// OOM kills in a memory cgroup, and watches every container of the shim for OOM kills with one
// goroutine. What takes a root directory can be pointed at a tree of files.
//
// It mirrors containerd v2.4 pkg/oom (v1: an eventfd per cgroup registered through
// cgroup.event_control on memory.oom_control, in one epoll set; v2: the memory.events file)
// and the cgroup lookups of cmd/containerd-shim-runc-v2/task/service.go. Unlike containerd, a
// notification is only a hint: the oom_kill counter decides whether there was a kill, so a
// kill is reported once however many paths notice it, and v2 cgroups share the v1 epoll set
// through one inotify descriptor instead of a goroutine per container.
//
// stats.go finds a container's cgroup, reads its metrics and joins the ShimCgroup; v1.go and
// v2.go read each layout's files, with what both parse in parse.go; controllers.go enables the
// v2 controllers at Create; memory.go finds a memory cgroup and counts its OOM kills; watch.go
// watches for them.
package cgroups
