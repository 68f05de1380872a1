// SPDX-License-Identifier: Apache-2.0

// Rootfs mounts (since step 03): the snapshotter's mounts from CreateTaskRequest.Rootfs are
// mounted on <bundle>/rootfs before runc create and unmounted after runc delete. Mirrors
// containerd v2.4 cmd/containerd-shim-runc-v2/runc/container.go NewContainer (the mount part)
// and core/mount/mount_linux.go; only the options that bind and overlay mounts use are known.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/containerd/api/types"
	"golang.org/x/sys/unix"
)

// mountFlags maps mount(8) options to flags; options not listed are handed to the file system.
var mountFlags = map[string]struct {
	clear bool
	flag  uintptr
}{
	"ro":          {false, unix.MS_RDONLY},
	"rw":          {true, unix.MS_RDONLY},
	"bind":        {false, unix.MS_BIND},
	"rbind":       {false, unix.MS_BIND | unix.MS_REC},
	"nosuid":      {false, unix.MS_NOSUID},
	"suid":        {true, unix.MS_NOSUID},
	"nodev":       {false, unix.MS_NODEV},
	"dev":         {true, unix.MS_NODEV},
	"noexec":      {false, unix.MS_NOEXEC},
	"exec":        {true, unix.MS_NOEXEC},
	"noatime":     {false, unix.MS_NOATIME},
	"relatime":    {false, unix.MS_RELATIME},
	"strictatime": {false, unix.MS_STRICTATIME},
	"rprivate":    {false, unix.MS_PRIVATE | unix.MS_REC},
}

// mountRootfs mounts each of mounts on target, in order. On failure it undoes what it did.
// target must be a directory or not exist: through a symlink the mounts would land wherever it
// points, and unmountAll, which does not follow one, would leave them there.
func mountRootfs(mounts []*types.Mount, target string) error {
	st, err := os.Lstat(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(target, 0o711); err != nil {
			return fmt.Errorf("create rootfs: %w", err)
		}
	case err != nil:
		return fmt.Errorf("rootfs: %w", err)
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("rootfs %s is a symlink", target)
	case !st.IsDir():
		return fmt.Errorf("rootfs %s is not a directory", target)
	}
	for i, m := range mounts {
		if err := mount(m, target); err != nil {
			if i > 0 {
				_ = unmountAll(target)
			}
			return err
		}
	}
	return nil
}

func mount(m *types.Mount, target string) error {
	var flags uintptr
	var data []string
	for _, o := range m.Options {
		if f, ok := mountFlags[o]; ok {
			if f.clear {
				flags &^= f.flag
			} else {
				flags |= f.flag
			}
			continue
		}
		if strings.ContainsAny(o, "\x00") {
			return fmt.Errorf("mount option %q: NUL byte", o)
		}
		data = append(data, o)
	}
	if m.Type == "" && flags&unix.MS_BIND == 0 {
		return fmt.Errorf("mount of %q has no type", m.Source)
	}
	err := unix.Mount(m.Source, target, m.Type, flags, strings.Join(data, ","))
	if err != nil {
		return fmt.Errorf("mount %s (%s) on %s: %w", m.Source, m.Type, target, err)
	}
	// A bind mount ignores MS_RDONLY, and nosuid, nodev and the like, on its first call; it
	// takes a remount, which sets every per-mount flag anew, so all of them go with it (as in
	// containerd's Mount.mount). Other mounts got their flags with the first call.
	if flags&(unix.MS_BIND|unix.MS_RDONLY) == unix.MS_BIND|unix.MS_RDONLY {
		if err := unix.Mount("", target, "", flags|unix.MS_REMOUNT, ""); err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH)
			return fmt.Errorf("remount %s read-only: %w", target, err)
		}
	}
	return nil
}

// unmountAll removes every mount stacked on target, however many there are; a target that is
// not a mount point, or not there, is fine. It never follows a symlink (UMOUNT_NOFOLLOW): the
// shim would otherwise unmount whatever a rootfs swapped for a link names. Each pass removes one
// mount, so the loop ends.
func unmountAll(target string) error {
	for {
		err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // nothing (more) mounted there, or a symlink
		case errors.Is(err, unix.EBUSY):
			// Still in use by a process that is on its way out: detach now, freed when it is gone.
			derr := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			if errors.Is(derr, unix.EINVAL) {
				return nil // gone in between
			}
			if derr != nil {
				return fmt.Errorf("unmount %s: %w", target, derr)
			}
		default:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
}
