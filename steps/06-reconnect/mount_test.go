// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
