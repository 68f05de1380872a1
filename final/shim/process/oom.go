// SPDX-License-Identifier: Apache-2.0

// A container's count of OOM kills, read when one of its processes exits so that TaskOOM comes
// before that process's TaskExit; containerd v2.4's runc shim has its watcher alone publish
// TaskOOM (pkg/oom/v1, internal/oom, started in cmd/containerd-shim-runc-v2/task/service.go).

package process

import (
	"github.com/shimwalk/shimwalk/final/shim/cgroups"
)

// oomCount is a container's memory cgroup and the kernel's count of OOM kills in it as last
// reported. Every report goes through OOMKilled, so that a kill is reported once whether the
// watcher's signal or a process's exit notices it first.
//
// containerd's runc shim publishes TaskOOM from its watcher alone, which can come after the
// TaskExit of the init the OOM killer ended. Reading the count when a process exits, before
// its TaskExit, orders the two: TaskOOM first.
type oomCount struct {
	mem  cgroups.Memory
	seen uint64
}

// newOOMCount finds the memory cgroup of pid and reads its count so far; nil when the host
// has no memory controller for it (a cgroup2 hierarchy without the memory controller).
func newOOMCount(pid int) *oomCount {
	m, err := cgroups.MemoryOf(cgroups.Root, pid)
	if err != nil {
		return nil
	}
	n, err := m.OOMKills()
	if err != nil {
		return nil
	}
	return &oomCount{mem: m, seen: n}
}

// MemoryCgroup is the container's memory cgroup, for the OOM watcher; false without one.
func (p *Init) MemoryCgroup() (cgroups.Memory, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.oom == nil {
		return cgroups.Memory{}, false
	}
	return p.oom.mem, true
}

// OOMKilled reports whether the kernel's OOM killer ended a process of the container since the
// container was created or since the last call that reported true. The cgroup outlives the
// init until Delete, so it answers after the init's exit too.
func (p *Init) OOMKilled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.oom == nil {
		return false
	}
	n, err := p.oom.mem.OOMKills()
	if err != nil || n <= p.oom.seen {
		return false
	}
	p.oom.seen = n
	return true
}
