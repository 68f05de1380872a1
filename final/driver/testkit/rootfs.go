// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/shimwalk/shimwalk/final/driver"
)

var (
	rootfsOnce sync.Once
	rootfsDir  string
	rootfsErr  error
)

// Rootfs is a busybox root file system built once per test process. Tests must not write to it:
// containers that need to write get an overlay on top of it, or a copy.
func Rootfs(t testing.TB) string {
	t.Helper()
	RequireCommand(t, "busybox")
	rootfsOnce.Do(func() {
		rootfsDir = filepath.Join(WorkDir(t), "rootfs")
		rootfsErr = driver.BuildBusyboxRootfs(rootfsDir)
	})
	if rootfsErr != nil {
		t.Fatal(rootfsErr)
	}
	return rootfsDir
}
