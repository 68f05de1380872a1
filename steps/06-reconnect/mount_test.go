// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// mountOptions is the per-mount options of the mount at path, from this process's mountinfo.
func mountOptions(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var opts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 5 && fields[4] == path {
			opts = strings.Split(fields[5], ",") // the last mount on path is the one in effect
		}
	}
	return opts
}

// TestReadOnlyBindKeepsItsFlags: a read-only bind mount takes a remount, and that remount must
// carry nosuid, nodev and noexec too, or the rootfs loses them.
func TestReadOnlyBindKeepsItsFlags(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "robind", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	r := k.CreateRequest()
	r.Rootfs = []*types.Mount{{Type: "bind", Source: testkit.Rootfs(t), Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}}}
	if _, err := k.Conn.Task.Create(k.Ctx(), r); err != nil {
		t.Fatal(err)
	}
	got := mountOptions(t, filepath.Join(k.Bundle, "rootfs"))
	for _, want := range []string{"ro", "nosuid", "nodev", "noexec"} {
		if !slices.Contains(got, want) {
			t.Errorf("rootfs mounted with %v, want %s among them", got, want)
		}
	}
}

// mountsAt counts the mounts on path, stacked ones included, in this process's mountinfo.
func mountsAt(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && fields[4] == path {
			n++
		}
	}
	return n
}

// TestManyStackedMountsAreAllUnmounted: Delete unmounts every mount the rootfs got, however many
// the Create stacked; an unmount that gives up after a fixed count leaves the rest behind.
func TestManyStackedMountsAreAllUnmounted(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "stacked", testkit.TaskOptions{Args: []string{"true"}, NullIO: true})
	r := k.CreateRequest()
	const n = 80
	source := testkit.Rootfs(t)
	r.Rootfs = nil
	for range n {
		r.Rootfs = append(r.Rootfs, &types.Mount{Type: "bind", Source: source, Options: []string{"rbind"}})
	}
	if _, err := k.Conn.Task.Create(k.Ctx(), r); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(k.Bundle, "rootfs")
	if got := mountsAt(t, rootfs); got < n {
		t.Fatalf("%d mounts on the rootfs after Create, want at least %d", got, n)
	}
	_, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
	if err != nil {
		t.Errorf("Delete: %v", err)
	}
	if left := mountsAt(t, rootfs); left > 0 {
		t.Errorf("%d mounts left on the rootfs after Delete", left)
	}
}

// TestRootfsSymlinkIsRefused: a bundle's rootfs that is a symlink is refused before anything is
// mounted: the mounts would land wherever the link points, on the host, and the unmount, which
// never follows a link, would leave them there.
func TestRootfsSymlinkIsRefused(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "linkedrootfs", testkit.TaskOptions{Args: []string{"true"}, NullIO: true})
	hosts := t.TempDir()
	t.Cleanup(func() {
		for mountsAt(t, hosts) > 0 {
			if err := syscall.Unmount(hosts, syscall.MNT_DETACH); err != nil {
				t.Error(err)
				return
			}
		}
	})
	rootfs := filepath.Join(k.Bundle, "rootfs")
	if err := os.RemoveAll(rootfs); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hosts, rootfs); err != nil {
		t.Fatal(err)
	}
	r := k.CreateRequest()
	r.Rootfs = []*types.Mount{{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=64k"}}}
	if _, err := k.Conn.Task.Create(k.Ctx(), r); err == nil {
		t.Error("Create mounted through a rootfs that is a symlink")
	}
	if n := mountsAt(t, hosts); n > 0 {
		t.Errorf("%d mounts on the symlink's target", n)
	}
}
