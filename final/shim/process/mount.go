// SPDX-License-Identifier: Apache-2.0

// Rootfs mounts: the request's mounts stacked on <bundle>/rootfs, as runc.NewContainer does with
// containerd's mount.All, and taken down again as init.Delete's mount.UnmountRecursive does.

package process

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// maxRootfsMounts bounds the mounts of one Create. A snapshotter hands over one mount, or a few
// with containerd 2.x's mount manager; nothing else bounds a request of up to 4 MiB, which
// could otherwise stack tens of thousands of mounts in the host's mount namespace.
const maxRootfsMounts = 128

// mountRootfs mounts each of mounts on target, in order, with containerd's own mount code:
// it knows what the snapshotters hand over (idmapped uidmap=/gidmap= overlays, lowerdir lists
// longer than a page, loop devices, FUSE helpers), and it keeps a mount's per-mount flags
// through the read-only remount of a bind. target must be a directory or not exist: a symlink
// would have the mounts land wherever it points. On failure mountRootfs undoes what it did.
func mountRootfs(mounts []*types.Mount, target string) error {
	if len(mounts) > maxRootfsMounts {
		return fmt.Errorf("%d rootfs mounts, more than %d: %w", len(mounts), maxRootfsMounts, errdefs.ErrInvalidArgument)
	}
	for _, m := range mounts {
		if err := checkMount(m); err != nil {
			return err
		}
	}
	st, err := os.Lstat(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(target, 0o711); err != nil {
			return fmt.Errorf("create rootfs: %w", err)
		}
	case err != nil:
		return fmt.Errorf("rootfs: %w", err)
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("rootfs %s is a symlink: %w", target, errdefs.ErrInvalidArgument)
	case !st.IsDir():
		return fmt.Errorf("rootfs %s is not a directory: %w", target, errdefs.ErrInvalidArgument)
	}
	for i, m := range mount.FromProto(mounts) {
		if err := m.Mount(target); err != nil {
			if i > 0 {
				_ = unmountAll(target)
			}
			return mountError(m, target, err)
		}
	}
	return nil
}

// checkMount refuses what no kernel would take, before anything is mounted.
func checkMount(m *types.Mount) error {
	if strings.ContainsRune(m.Type+m.Source+m.Target, 0) {
		return fmt.Errorf("mount of %q: NUL byte: %w", m.Source, errdefs.ErrInvalidArgument)
	}
	for _, o := range m.Options {
		if strings.ContainsRune(o, 0) {
			return fmt.Errorf("mount option %q: NUL byte: %w", o, errdefs.ErrInvalidArgument)
		}
	}
	if m.Type == "" && !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") {
		return fmt.Errorf("mount of %q has no type: %w", m.Source, errdefs.ErrInvalidArgument)
	}
	return nil
}

// mountError classes what the kernel says of a request it cannot make sense of (an option, a
// type, a source) as the request's fault; anything else is the host's.
func mountError(m mount.Mount, target string, err error) error {
	for _, bad := range []error{unix.EINVAL, unix.ENODEV, unix.ENOENT, unix.ENOTDIR, unix.ENOTBLK} {
		if errors.Is(err, bad) {
			return fmt.Errorf("mount %s (%s) on %s: %v: %w", m.Source, m.Type, target, err, errdefs.ErrInvalidArgument)
		}
	}
	return fmt.Errorf("mount %s (%s) on %s: %w", m.Source, m.Type, target, err)
}

// unmountAll removes every mount stacked on target and below it, however many; a target that
// is not a mount point, or does not exist, is fine. It never follows a symlink: one swapped in
// for the rootfs would otherwise have the shim unmount whatever the link names. A mount still
// in use (by a process on its way out, or by a mount below it) is detached, and freed by the
// kernel once nothing uses it.
func unmountAll(target string) error {
	for {
		err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // nothing (more) mounted there, or not there at all
		case errors.Is(err, unix.EBUSY):
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
