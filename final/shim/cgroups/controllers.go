// SPDX-License-Identifier: Apache-2.0

// Controllers at Create: on cgroup v2, every controller the host offers is enabled on the way
// down to a container's cgroup, as containerd's runc shim does in its task service's Create
// (cgroup2.Manager.RootControllers and ToggleControllers).

package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// enableControllers writes every controller of root's cgroup.controllers into the
// cgroup.subtree_control of root and of each cgroup between root and the one procCgroup (the
// text of /proc/<pid>/cgroup) names on v2, but not of that cgroup itself: its children, if it
// ever has any, are the container's business. As in the reference, a write that fails is
// forgiven if a deeper one succeeds (a parent may refuse what is already enabled below it); the
// last failure is returned.
func enableControllers(root string, procCgroup []byte) error {
	group, err := unifiedPath(procCgroup)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("root controllers: %w", err)
	}
	controllers := strings.Fields(string(data))
	if len(controllers) == 0 || group == "/" {
		return nil
	}
	line := "+" + strings.Join(controllers, " +")
	dir := root
	var lastErr error
	for _, name := range strings.Split(strings.TrimPrefix(group, "/"), "/") {
		if err := writeSubtreeControl(dir, line); err != nil {
			lastErr = err
		} else {
			lastErr = nil
		}
		dir = filepath.Join(dir, name)
	}
	return lastErr
}

func writeSubtreeControl(dir, line string) error {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.subtree_control"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("enable controllers in %s: %w", dir, err)
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("enable controllers %q in %s: %w", line, dir, err)
	}
	return nil
}

// EnableControllersOf is enableControllers for pid's cgroup below root, when root is a cgroup2
// mount; on v1 and hybrid hosts there is nothing to enable.
func EnableControllersOf(root string, pid int) error {
	if !isUnified(root) {
		return nil
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return fmt.Errorf("cgroups of %d: %w", pid, err)
	}
	return enableControllers(root, data)
}
