// SPDX-License-Identifier: Apache-2.0

// A container's cgroup for its metrics (Load, Metrics) and the shim's move into the ShimCgroup
// (Join), on the layout the host runs. Mirrors containerd v2.4's runc shim: loadProcessCgroup
// in cmd/containerd-shim-runc-v2/runc/container.go, Stats in task/service.go, and the
// ShimCgroup join of manager.Start (manager/manager_linux.go).

package cgroups

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/errdefs"
)

// Group is a container's cgroup, v1 or v2 as the host runs them, for its metrics.
//
// It mirrors the cgroup lookup of containerd v2.4 cmd/containerd-shim-runc-v2/runc/container.go
// (loadProcessCgroup: cgroup1.Load(cgroup1.PidPath(pid)), or cgroup2.PidGroupPath and
// cgroup2.Load). Unlike it, the v2 path comes from the same /proc/<pid>/cgroup parser as the
// OOM watch, below a mount point that tests may point at a tree of files, and the files are
// read in v1.go and v2.go.
type Group struct {
	v1 map[string]string // the cgroup v1 directory of each hierarchy that has the cgroup
	v2 string            // the cgroup v2 directory
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
	procCgroup, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("cgroup of %d: %v: %w", pid, err, errdefs.ErrNotFound)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroup of %d: %w", pid, err)
	}
	g, err := loadV1(procCgroup, mountinfo)
	if err != nil {
		return nil, fmt.Errorf("cgroup of %d: %v: %w", pid, err, errdefs.ErrNotFound)
	}
	return g, nil
}

// loadV1 is the v1 cgroup that procCgroup, the text of /proc/<pid>/cgroup, names in the
// hierarchies that mountinfo, the text of /proc/self/mountinfo, mounts.
func loadV1(procCgroup, mountinfo []byte) (*Group, error) {
	root, err := v1Root(mountinfo)
	if err != nil {
		return nil, err
	}
	where, err := v1Path(procCgroup, mountinfo)
	if err != nil {
		return nil, err
	}
	dirs, err := v1Dirs(root, where.of)
	if err != nil {
		return nil, err
	}
	return &Group{v1: dirs}, nil
}

// v1Path is cgroup1.PidPath for the process whose /proc/<pid>/cgroup is procCgroup, with the
// mount table read once. The library scans all of /proc/self/mountinfo for each of the dozen
// lines of /proc/<pid>/cgroup, and a host running containers has a long mount table (a rootfs
// per container): that garbage was most of what starting a container added to an idle shim's
// memory (bench/NOTES.md). The paths are the library's, quirks included: a controller's path is
// made relative to the root of its mount (a cgroup namespace's, say), and every controller the
// process lists must be mounted.
func v1Path(procCgroup, mountinfo []byte) (v1Paths, error) {
	paths := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(procCgroup), "\n"), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) < 3 {
			return nil, fmt.Errorf("invalid cgroup entry %q", line)
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "" {
				paths[c] = parts[2]
			}
		}
	}
	// The root of the first cgroup v1 mount that has each option (a controller, or name=...).
	roots := map[string]string{}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		fields := strings.Split(line, " ")
		if len(fields) < 10 || fields[len(fields)-3] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(fields[len(fields)-1], ",") {
			if _, ok := roots[opt]; !ok {
				roots[opt] = fields[3]
			}
		}
	}
	for name, p := range paths {
		root, ok := roots[name]
		if !ok {
			return nil, fmt.Errorf("no cgroup v1 mount has %s", name)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s of %s: %w", p, name, err)
		}
		if rel == "." {
			rel = root
		}
		paths[name] = filepath.Join("/", rel)
	}
	return paths, nil
}

// v1Paths are a process's cgroup paths by controller, or by "name=" and a hierarchy's name.
type v1Paths map[string]string

// of is the path of controller or named hierarchy name; false if the process lists neither.
func (p v1Paths) of(name string) (string, bool) {
	if s, ok := p[name]; ok {
		return s, true
	}
	s, ok := p["name="+name]
	return s, ok
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
	m, err := v1Stat(g.v1, "/proc/partitions")
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 stats: %w", err)
	}
	return m, nil
}

// Join moves process pid into the existing cgroup path (the ShimCgroup runtime option), on
// cgroup v1 or v2 as the host runs them.
func Join(p string, pid int) error {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("shim cgroup %q: not an absolute, clean cgroup path", p)
	}
	if cgroups.Mode() == cgroups.Unified {
		if err := joinDir(filepath.Join(Root, p), pid); err != nil {
			return fmt.Errorf("join shim cgroup %s: %w", p, err)
		}
		return nil
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("join shim cgroup %s: %w", p, err)
	}
	root, err := v1Root(mountinfo)
	if err == nil {
		err = v1Join(root, p, pid)
	}
	if err != nil {
		return fmt.Errorf("join shim cgroup %s: %w", p, err)
	}
	return nil
}
