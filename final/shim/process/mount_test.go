// SPDX-License-Identifier: Apache-2.0

package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/errdefs"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// mountDir is a fresh directory for mount tests; whatever a test leaves mounted below it is
// taken down when the test ends, after testkit has reported it.
func mountDir(t *testing.T) string {
	t.Helper()
	testkit.RequireRoot(t)
	dir := testkit.TempDir(t)
	t.Cleanup(func() {
		for _, m := range mountsUnder(t, dir) {
			_ = unix.Unmount(m.Mountpoint, unix.MNT_DETACH)
		}
	})
	return dir
}

func mountsUnder(t *testing.T, dir string) []*mountinfo.Info {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	// Deepest and latest first: the order they come off in.
	slices.Reverse(ms)
	return ms
}

// top is the topmost mount on target, failing the test when there is none.
func top(t *testing.T, target string) *mountinfo.Info {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
	if err != nil || len(ms) == 0 {
		t.Fatalf("nothing mounted on %s (%v)", target, err)
	}
	return ms[len(ms)-1]
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mountAndUnmount(t *testing.T, mounts []*types.Mount, target string) {
	t.Helper()
	if err := mountRootfs(mounts, target); err != nil {
		t.Fatalf("mountRootfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unmountAll(target); err != nil {
			t.Errorf("unmountAll: %v", err)
		}
		if left := mountsUnder(t, target); len(left) > 0 {
			t.Errorf("mounts left on %s: %d", target, len(left))
		}
	})
}

// A read-only mount keeps its other per-mount flags: the remount that makes a bind read-only
// resets every flag it is not given, so it must be given all of them.
func TestMountReadOnlyKeepsFlags(t *testing.T) {
	dir := mountDir(t)
	src := filepath.Join(dir, "src")
	mkdirs(t, src)
	for _, m := range []*types.Mount{
		{Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec"}},
		{Type: "bind", Source: src, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
		{Source: src, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}},
	} {
		t.Run(m.Type+"-"+m.Options[0], func(t *testing.T) {
			target := filepath.Join(testkit.TempDir(t), "rootfs")
			mountAndUnmount(t, []*types.Mount{m}, target)
			got := strings.Split(top(t, target).Options, ",")
			for _, want := range []string{"ro", "nosuid", "nodev", "noexec"} {
				if !slices.Contains(got, want) {
					t.Errorf("mounted with %v: %s is missing", got, want)
				}
			}
		})
	}
}

// unmountAll takes off every mount stacked on the target, however many there are.
func TestUnmountAllStacked(t *testing.T) {
	target := filepath.Join(mountDir(t), "rootfs")
	mkdirs(t, target)
	const n = 100
	for i := 0; i < n; i++ {
		if err := unix.Mount("tmpfs", target, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatal(err)
		}
	}
	// And one below, which the stacked ones cover.
	sub := filepath.Join(target, "sub")
	mkdirs(t, sub)
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	if err := unmountAll(target); err != nil {
		t.Fatalf("unmountAll of %d stacked mounts: %v", n+1, err)
	}
	if left := mountsUnder(t, target); len(left) > 0 {
		t.Errorf("%d of %d mounts left", len(left), n+1)
	}
}

// A Create may not stack more than maxRootfsMounts mounts: it is refused before any is made.
func TestMountRootfsBound(t *testing.T) {
	target := filepath.Join(mountDir(t), "rootfs")
	mounts := make([]*types.Mount, maxRootfsMounts+1)
	for i := range mounts {
		mounts[i] = &types.Mount{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=64k"}}
	}
	err := mountRootfs(mounts, target)
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("mountRootfs of %d mounts: %v, want InvalidArgument", len(mounts), err)
	}
	if left := mountsUnder(t, target); len(left) > 0 {
		t.Errorf("%d mounts made", len(left))
	}
	// The bound itself is fine.
	mountAndUnmount(t, mounts[:maxRootfsMounts], target)
	if got := len(mountsUnder(t, target)); got != maxRootfsMounts {
		t.Errorf("%d mounts, want %d", got, maxRootfsMounts)
	}
}

// A rootfs swapped for a symlink is neither mounted through nor unmounted through.
func TestRootfsSymlink(t *testing.T) {
	dir := mountDir(t)
	elsewhere := filepath.Join(dir, "elsewhere")
	mkdirs(t, elsewhere)
	target := filepath.Join(dir, "rootfs")
	if err := os.Symlink(elsewhere, target); err != nil {
		t.Fatal(err)
	}
	err := mountRootfs([]*types.Mount{{Type: "tmpfs", Source: "tmpfs"}}, target)
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("mountRootfs on a symlink: %v, want InvalidArgument", err)
	}
	if left := mountsUnder(t, elsewhere); len(left) > 0 {
		t.Fatalf("mounted through the symlink on %s", elsewhere)
	}

	// Something of the host's is mounted where the link points: unmounting the rootfs must
	// leave it alone.
	if err := unix.Mount("tmpfs", elsewhere, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	if err := unmountAll(target); err != nil {
		t.Errorf("unmountAll of a symlink: %v", err)
	}
	if left := mountsUnder(t, elsewhere); len(left) != 1 {
		t.Errorf("unmountAll through a symlink: %d mounts left on its target, want 1", len(left))
	}
}

// uidmap= and gidmap= make an idmapped overlay, as containerd 2.x's overlay snapshotter asks
// for user-namespaced pods: a file of root's in a layer shows as owned by the mapped ids.
func TestMountIDMapped(t *testing.T) {
	dir := mountDir(t)
	lower, upper, work := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	mkdirs(t, lower, upper, work)
	writeFile(t, filepath.Join(lower, "f"), "layer")
	target := filepath.Join(dir, "rootfs")
	mountAndUnmount(t, []*types.Mount{{Type: "overlay", Source: "overlay", Options: []string{
		"lowerdir=" + lower, "upperdir=" + upper, "workdir=" + work,
		"uidmap=0:100000:65536", "gidmap=0:200000:65536",
	}}}, target)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(target, "f"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 100000 || st.Gid != 200000 {
		t.Errorf("a layer's root-owned file shows as %d:%d, want 100000:200000", st.Uid, st.Gid)
	}
	// The options are the shim's, never the overlay's.
	if o := top(t, target).VFSOptions; strings.Contains(o, "uidmap") {
		t.Errorf("overlay mounted with %q", o)
	}
}

// An overlay of more layers than fit in one page of mount options still mounts. The layers sit
// side by side as a snapshotter keeps them (.../snapshots/<n>/fs), below a long common path.
func TestMountLongLowerdir(t *testing.T) {
	dir := mountDir(t)
	snapshots := filepath.Join(dir, strings.Repeat("s", 200), "snapshots")
	var lowers []string
	for i := 0; len(strings.Join(lowers, ":")) < 2*os.Getpagesize(); i++ {
		l := filepath.Join(snapshots, fmt.Sprint(i), "fs")
		mkdirs(t, l)
		writeFile(t, filepath.Join(l, fmt.Sprintf("f%03d", i)), "")
		lowers = append(lowers, l)
	}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	mkdirs(t, upper, work)
	target := filepath.Join(dir, "rootfs")
	mountAndUnmount(t, []*types.Mount{{Type: "overlay", Source: "overlay", Options: []string{
		"lowerdir=" + strings.Join(lowers, ":"), "upperdir=" + upper, "workdir=" + work,
	}}}, target)
	entries, err := os.ReadDir(target)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(lowers) {
		t.Errorf("the rootfs holds %d files, want one of each of %d layers", len(entries), len(lowers))
	}
}

// loop mounts a file system image through a loop device, which goes with the unmount.
func TestMountLoop(t *testing.T) {
	dir := mountDir(t)
	testkit.RequireCommand(t, "mkfs.ext4")
	image := filepath.Join(dir, "image.ext4")
	if err := os.WriteFile(image, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(image, 8<<20); err != nil {
		t.Fatal(err)
	}
	content := filepath.Join(dir, "content")
	mkdirs(t, content)
	writeFile(t, filepath.Join(content, "hello"), "from the image")
	if out, err := exec.Command("mkfs.ext4", "-q", "-d", content, image).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	target := filepath.Join(dir, "rootfs")
	if err := mountRootfs([]*types.Mount{{Type: "ext4", Source: image, Options: []string{"loop", "ro"}}}, target); err != nil {
		t.Fatalf("mountRootfs: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(target, "hello"))
	if err != nil || string(data) != "from the image" {
		t.Errorf("read from the image: %q, %v", data, err)
	}
	if o := top(t, target).Options; !strings.HasPrefix(o, "ro") {
		t.Errorf("mounted with %q, want ro", o)
	}
	if err := unmountAll(target); err != nil {
		t.Fatal(err)
	}
	// The device is released with its last mount (autoclear): none still holds the image.
	if devs := loopDevicesOf(t, image); len(devs) > 0 {
		t.Errorf("loop devices %v still hold the image", devs)
	}
}

func loopDevicesOf(t *testing.T, image string) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(data)) == image {
			devs = append(devs, f)
		}
	}
	return devs
}

// A fuse.<subtype> mount is the job of the mount.fuse helper, as mount(8) would run it; what
// the shim hands over reaches the helper unchanged.
func TestMountFUSEHelper(t *testing.T) {
	dir := mountDir(t)
	bin := filepath.Join(dir, "bin")
	mkdirs(t, bin)
	args := filepath.Join(dir, "args")
	// A stand-in helper: records its arguments and mounts a tmpfs where it was asked to.
	testkit.WriteExecutable(t, filepath.Join(bin, "mount.fuse3"), []byte(fmt.Sprintf(
		"#!/bin/sh\necho \"$@\" > %q\nexec mount -t tmpfs tmpfs \"$2\"\n", args)))
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	target := filepath.Join(dir, "rootfs")
	mountAndUnmount(t, []*types.Mount{{Type: "fuse3.fuse-overlayfs", Source: "overlay", Options: []string{"lowerdir=/l", "allow_other"}}}, target)
	got, err := os.ReadFile(args)
	if err != nil {
		t.Fatalf("the helper did not run: %v", err)
	}
	want := fmt.Sprintf("overlay %s -o lowerdir=/l -o allow_other -t fuse-overlayfs", target)
	if strings.TrimSpace(string(got)) != want {
		t.Errorf("the helper ran with %q, want %q", got, want)
	}
	if fs := top(t, target).FSType; fs != "tmpfs" {
		t.Errorf("the rootfs is %s, want what the helper mounted", fs)
	}
}
