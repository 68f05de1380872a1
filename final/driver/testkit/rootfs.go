// SPDX-License-Identifier: Apache-2.0

// The busybox root file system of the test process, built once and shared read-only by every
// test's containers. Not a mirror of any containerd function: containerd's tests pull an
// image.

package testkit

import (
	"path/filepath"
	"testing"

	"github.com/shimwalk/shimwalk/final/driver"
)

// rootfs is the busybox root file system of the test process.
var rootfs perProcess[string]

// Rootfs is a busybox root file system built once per test process. Tests must not write to it:
// containers that need to write get an overlay on top of it, or a copy.
func Rootfs(t testing.TB) string {
	t.Helper()
	RequireCommand(t, "busybox")
	return rootfs.get(t, func() (string, error) {
		dir := filepath.Join(WorkDir(t), "rootfs")
		return dir, driver.BuildBusyboxRootfs(dir)
	})
}
