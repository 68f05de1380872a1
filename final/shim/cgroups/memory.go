// SPDX-License-Identifier: Apache-2.0

// A container's memory cgroup, found through /proc/<pid>/cgroup on either layout, and the
// kernel's count of its OOM kills (the oom_kill line), which decides whether a notification
// was a kill. containerd v2.4's shim finds the cgroup in runc/container.go (loadProcessCgroup);
// its pkg/oom/v2 compares the same count between events, while pkg/oom/v1 reports every
// signal of the eventfd.

package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is where the host mounts its cgroup hierarchies.
const Root = "/sys/fs/cgroup"

// ErrNoMemoryCgroup is returned when a process has no memory cgroup this package can read.
var ErrNoMemoryCgroup = errors.New("no memory cgroup")

// Memory is one memory cgroup: its directory and the layout that directory belongs to.
type Memory struct {
	Dir     string
	Unified bool // cgroup v2: memory.events; else v1: memory.oom_control
}

// isUnified reports whether root is a cgroup2 mount. On a hybrid host /sys/fs/cgroup is a
// tmpfs holding the v1 hierarchies, so the memory controller is found on v1 there.
func isUnified(root string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC
}

// MemoryOf finds the memory cgroup of pid below root, the layout decided by what root is.
func MemoryOf(root string, pid int) (Memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("cgroups of %d: %w", pid, err)
	}
	return findMemory(root, isUnified(root), data)
}

// findMemory finds the memory cgroup described by procCgroup, the text of /proc/<pid>/cgroup,
// below root: on v2 the "0::" line, on v1 the line whose controllers include memory. The
// kernel lists the v1 lines whatever is mounted, so the layout must be given, not guessed.
func findMemory(root string, unified bool, procCgroup []byte) (Memory, error) {
	var (
		group string
		err   error
	)
	if unified {
		group, err = unifiedPath(procCgroup)
	} else {
		group, err = cgroupPath(procCgroup, func(id, controllers string) bool { return hasController(controllers, "memory") })
		root = filepath.Join(root, "memory")
	}
	if err != nil {
		return Memory{}, fmt.Errorf("%v: %w", err, ErrNoMemoryCgroup)
	}
	return Memory{Dir: filepath.Join(root, group), Unified: unified}, nil
}

// unifiedPath is the cgroup v2 path in procCgroup, from its "0::" line.
func unifiedPath(procCgroup []byte) (string, error) {
	return cgroupPath(procCgroup, func(id, controllers string) bool { return id == "0" && controllers == "" })
}

// cgroupPath is the path of the first line of procCgroup that match accepts. A path outside
// the hierarchy (a cgroup namespace shows "/.." for one) has no directory below a mount point.
func cgroupPath(procCgroup []byte, match func(id, controllers string) bool) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(procCgroup))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !match(parts[0], parts[1]) {
			continue
		}
		group := parts[2]
		if !path.IsAbs(group) || path.Clean(group) != group || strings.HasPrefix(group, "/..") {
			return "", fmt.Errorf("cgroup path %q is not below the hierarchy's root", group)
		}
		return group, nil
	}
	return "", errors.New("no such cgroup in /proc/<pid>/cgroup")
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// eventsFile is the file that counts the cgroup's OOM kills, and that the kernel signals.
func (m Memory) eventsFile() string {
	if m.Unified {
		return filepath.Join(m.Dir, "memory.events")
	}
	return filepath.Join(m.Dir, "memory.oom_control")
}

// OOMKills reads how many processes the OOM killer has ended in the cgroup since it was made:
// the oom_kill line of memory.events (v2) or memory.oom_control (v1, Linux 4.13 and later).
func (m Memory) OOMKills() (uint64, error) {
	file := m.eventsFile()
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("read oom count: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "oom_kill" {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: oom_kill %q: %w", file, f[1], err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s has no oom_kill line", file)
}
