// SPDX-License-Identifier: Apache-2.0

package process

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/errdefs"
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

// MountRootfs mounts each of mounts on target, in order. On failure it undoes what it did.
func MountRootfs(mounts []*types.Mount, target string) error {
	if err := os.MkdirAll(target, 0o711); err != nil {
		return fmt.Errorf("create rootfs: %w", err)
	}
	for i, m := range mounts {
		if err := mount(m, target); err != nil {
			if i > 0 {
				_ = UnmountAll(target)
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
			return fmt.Errorf("mount option %q: NUL byte: %w", o, errdefs.ErrInvalidArgument)
		}
		data = append(data, o)
	}
	if m.Type == "" && flags&unix.MS_BIND == 0 {
		return fmt.Errorf("mount of %q has no type: %w", m.Source, errdefs.ErrInvalidArgument)
	}
	err := unix.Mount(m.Source, target, m.Type, flags&^unix.MS_RDONLY, strings.Join(data, ","))
	if err != nil {
		// What the kernel says of a request it cannot make sense of (an option, a type, a
		// source) is the request's fault; anything else is the host's.
		for _, bad := range []error{unix.EINVAL, unix.ENODEV, unix.ENOENT, unix.ENOTDIR, unix.ENOTBLK} {
			if errors.Is(err, bad) {
				return fmt.Errorf("mount %s (%s) on %s: %v: %w", m.Source, m.Type, target, err, errdefs.ErrInvalidArgument)
			}
		}
		return fmt.Errorf("mount %s (%s) on %s: %w", m.Source, m.Type, target, err)
	}
	// A bind mount ignores MS_RDONLY on the first call; read-only takes a remount.
	if flags&unix.MS_RDONLY != 0 {
		remount := unix.MS_REMOUNT | unix.MS_RDONLY | (flags & unix.MS_BIND)
		if err := unix.Mount("", target, "", remount, ""); err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH)
			return fmt.Errorf("remount %s read-only: %w", target, err)
		}
	}
	return nil
}

// UnmountAll removes every mount stacked on target; a target that is not a mount point is fine.
func UnmountAll(target string) error {
	for i := 0; i < 64; i++ {
		err := unix.Unmount(target, 0)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // nothing (more) mounted there
		case errors.Is(err, unix.EBUSY):
			// Still in use by a process that is on its way out: detach now, freed when it is gone.
			if derr := unix.Unmount(target, unix.MNT_DETACH); derr != nil {
				return fmt.Errorf("unmount %s: %w", target, derr)
			}
		default:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmount %s: too many stacked mounts", target)
}
