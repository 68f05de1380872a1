// SPDX-License-Identifier: Apache-2.0

// A root file system for test containers built from the host's static busybox, so no image
// or registry is needed. Not a mirror of any containerd function: containerd takes a rootfs
// from snapshots of an unpacked image.

package driver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/shimwalk/shimwalk/final/internal/fsutil"
)

// BuildBusyboxRootfs makes dir a minimal root file system from the host's static busybox: the
// binary, a link per applet in /bin, and the empty directories runc mounts over. No image
// registry is needed.
func BuildBusyboxRootfs(dir string) error {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox not found (install busybox-static): %w", err)
	}
	for _, sub := range []string{"bin", "dev", "proc", "sys", "tmp", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := fsutil.CopyFile(busybox, filepath.Join(dir, "bin", "busybox"), 0o755); err != nil {
		return fmt.Errorf("rootfs: copy busybox: %w", err)
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("rootfs: busybox --list: %w", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		link := filepath.Join(dir, "bin", applet)
		if err := os.Symlink("busybox", link); err != nil && !os.IsExist(err) {
			return fmt.Errorf("rootfs: link %s: %w", applet, err)
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	// The modes above went through the process's umask, which another goroutine may narrow
	// for a moment (to create a socket 0600): a busybox made then is not executable.
	modes := map[string]os.FileMode{"bin/busybox": 0o755, "tmp": 0o1777, "etc/passwd": 0o644, "etc/group": 0o644}
	for _, sub := range []string{".", "bin", "dev", "proc", "sys", "etc", "root"} {
		modes[sub] = 0o755
	}
	for name, mode := range modes {
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	return nil
}
