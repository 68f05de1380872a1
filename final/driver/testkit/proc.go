// SPDX-License-Identifier: Apache-2.0

// What a test asks of the processes and files a run leaves: pids, open files, mounts, children,
// runc's state, the shims of a driver, and whether a container's shell has set its trap. Reading
// /proc itself is the driver's (proc.go there); not a mirror of any containerd function.

package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// ShellTraps reports whether pid, a container's init running busybox sh, has set its trap for
// sig. Until runc start has exec'd sh, the same pid is runc's init, whose Go runtime catches
// every signal: so the handler (SigCgt in the process's status) counts only once the process
// runs busybox.
func ShellTraps(pid int, sig syscall.Signal) bool {
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); !strings.HasSuffix(exe, "/busybox") {
		return false
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(status), "\n") {
		if mask, ok := strings.CutPrefix(line, "SigCgt:\t"); ok {
			bits, err := strconv.ParseUint(mask, 16, 64)
			return err == nil && bits&(1<<(sig-1)) != 0
		}
	}
	return false
}

// ReadPid reads a pid file.
func ReadPid(t testing.TB, path string) int {
	t.Helper()
	pid, err := bundle.ReadPidFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// ExpectGone waits for pid to exit (a zombie counts as gone: reaping it is its parent's job) and
// fails the test if it does not. A survivor is killed so that it does not outlive the test.
func ExpectGone(t testing.TB, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for driver.Alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("%s (pid %d) is still running", what, pid)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NewDriver returns a driver for shim with a private state directory, namespace "test" and
// a private socket directory. When the test ends it fails the test for every shim still
// running in that state directory, stops it, and removes the bundles.
func NewDriver(t testing.TB, shim string) *driver.Driver {
	t.Helper()
	dir := TempDir(t)
	d := driver.New(filepath.Join(dir, "state"), "test", shim)
	// Cgroups are global: test processes running side by side must not share a path.
	d.CgroupParent = "/shimwalk-test/" + filepath.Base(WorkDir(t))
	d.Env = []string{
		"SHIMWALK_SOCKET_DIR=" + filepath.Join(dir, "s"),
		"SHIMWALK_RUNC_ROOT=" + RuncRoot(t),
	}
	t.Cleanup(func() { checkNoShims(t, d) })
	return d
}

// SocketDir is the socket directory the driver's shims use.
func SocketDir(d *driver.Driver) string {
	for _, e := range d.Env {
		if v, ok := strings.CutPrefix(e, "SHIMWALK_SOCKET_DIR="); ok {
			return v
		}
	}
	return "/run/shimwalk/s"
}

func checkNoShims(t testing.TB, d *driver.Driver) {
	t.Helper()
	ids, err := d.Tasks()
	if err != nil {
		t.Errorf("list tasks: %v", err)
	}
	for _, id := range ids {
		pid, err := bundle.ReadPidFile(filepath.Join(d.Bundle(id), bundle.ShimPidFile))
		if err == nil && driver.Alive(pid) {
			t.Errorf("shim for %s (pid %d) outlived the test", id, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// RuncRoot is the runc state root of every shim the kit starts in this test process (the shims
// add the namespace below it), kept apart from the host's and from other test processes'.
func RuncRoot(t testing.TB) string {
	return filepath.Join(WorkDir(t), "runc")
}

// RuncContainers lists the containers runc knows in namespace.
func RuncContainers(t testing.TB, namespace string) []string {
	t.Helper()
	r := Run(t, "", nil, "runc", "--root", filepath.Join(RuncRoot(t), namespace), "list", "-q")
	if r.Code != 0 {
		t.Fatalf("runc list: %s", r.Stderr)
	}
	return strings.Fields(r.Stdout)
}

// OpenFiles lists the paths among paths that process pid holds open.
func OpenFiles(pid int, paths ...string) []string {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	var open []string
	for _, fd := range fds {
		target, err := os.Readlink(fd)
		if err != nil {
			continue
		}
		for _, p := range paths {
			if p != "" && target == p {
				open = append(open, target)
			}
		}
	}
	return open
}

// Mounts lists the mount points at or below dir.
func Mounts(t testing.TB, dir string) []string {
	t.Helper()
	m, err := driver.MountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Children lists the pids whose parent is pid.
func Children(pid int) []int {
	p, err := driver.ReadProc(pid)
	if err != nil {
		return nil
	}
	return p.Children
}

// Events serves the Events service at the driver's TTRPC_ADDRESS for the rest of the test, in
// containerd's place, and returns it.
func Events(t testing.TB, d *driver.Driver) *driver.EventServer {
	t.Helper()
	s, err := driver.ListenEvents(d.TTRPCAddress)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RuncContainersAt lists the containers a runc-compatible binary (runc when binary is "") knows
// in namespace under root.
func RuncContainersAt(t testing.TB, root, namespace, binary string) []string {
	t.Helper()
	if binary == "" {
		binary = "runc"
	}
	r := Run(t, "", nil, binary, "--root", filepath.Join(root, namespace), "list", "-q")
	if r.Code != 0 {
		if strings.Contains(r.Stderr, "no such file") {
			return nil
		}
		t.Fatalf("%s list: %s", binary, r.Stderr)
	}
	return strings.Fields(r.Stdout)
}
