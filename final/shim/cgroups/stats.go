// SPDX-License-Identifier: Apache-2.0

package cgroups

import (
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/errdefs"
)

// Group is a container's cgroup, v1 or v2 as the host runs them, for its metrics.
//
// It mirrors the cgroup lookup of containerd v2.4 cmd/containerd-shim-runc-v2/task/service.go
// (Start: cgroup1.Load(cgroup1.PidPath(pid)), or cgroup2.PidGroupPath and cgroup2.Load). Unlike
// it, the v2 path comes from the same /proc/<pid>/cgroup parser as the OOM watch, below a
// mount point that tests may point at a tree of files, and v2 files are read in v2.go.
type Group struct {
	v1 cgroup1.Cgroup
	v2 string // the cgroup v2 directory
}

// Load finds the cgroup of pid through /proc, which works whatever driver (cgroupfs or systemd)
// runc used. The layout is the one /sys/fs/cgroup is mounted with in the caller's mount
// namespace: v2 when it is a cgroup2 mount, else the v1 hierarchies.
func Load(pid int) (*Group, error) {
	if cgroups.Mode() == cgroups.Unified {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			return nil, fmt.Errorf("cgroup of %d: %v: %w", pid, err, errdefs.ErrNotFound)
		}
		return LoadV2(Root, data)
	}
	cg, err := cgroup1.Load(cgroup1.PidPath(pid))
	if err != nil {
		return nil, fmt.Errorf("cgroup of %d: %v: %w", pid, err, errdefs.ErrNotFound)
	}
	return &Group{v1: cg}, nil
}

// LoadV2 is the v2 cgroup that procCgroup, the text of /proc/<pid>/cgroup, names below the
// cgroup2 mount point root.
func LoadV2(root string, procCgroup []byte) (*Group, error) {
	group, err := unifiedPath(procCgroup)
	if err != nil {
		return nil, fmt.Errorf("cgroup v2 path: %v: %w", err, errdefs.ErrNotFound)
	}
	return &Group{v2: filepath.Join(root, group)}, nil
}

// Metrics reads the group's metrics in the form `ctr task metrics` decodes: a
// *cgroup1/stats.Metrics or a *cgroup2/stats.Metrics. Controllers the group lacks (no memory
// controller on a cgroup2 hierarchy whose controllers are bound to v1) read as zero.
func (g *Group) Metrics() (any, error) {
	if g.v2 != "" {
		m, err := v2Stat(g.v2)
		if err != nil {
			return nil, fmt.Errorf("cgroup v2 stats: %w", err)
		}
		return m, nil
	}
	m, err := g.v1.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 stats: %w", err)
	}
	return m, nil
}

// Join moves process pid into the existing cgroup path (the ShimCgroup runtime option), on
// cgroup v1 or v2 as the host runs them.
func Join(p string, pid int) error {
	if cgroups.Mode() == cgroups.Unified {
		if !path.IsAbs(p) || path.Clean(p) != p {
			return fmt.Errorf("shim cgroup %q: not an absolute, clean cgroup path", p)
		}
		if err := v2Join(filepath.Join(Root, p), pid); err != nil {
			return fmt.Errorf("join shim cgroup %s: %w", p, err)
		}
		return nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(p))
	if err != nil {
		return fmt.Errorf("load shim cgroup %s: %w", p, err)
	}
	if err := cg.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("join shim cgroup %s: %w", p, err)
	}
	return nil
}
