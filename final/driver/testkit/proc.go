// SPDX-License-Identifier: Apache-2.0

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
)

// Stat is the part of /proc/PID/stat the tests look at.
type Stat struct {
	Pid, PPid, Pgid, Sid int
	State                byte // R, S, Z, ...
	Comm                 string
}

// ProcStat reads /proc/pid/stat.
func ProcStat(pid int) (Stat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	// comm may contain spaces and parentheses; the fields after it start at the last ')'.
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < 0 || end+2 >= len(s) {
		return Stat{}, fmt.Errorf("malformed stat for %d", pid)
	}
	f := strings.Fields(s[end+2:])
	if len(f) < 4 {
		return Stat{}, fmt.Errorf("malformed stat for %d", pid)
	}
	st := Stat{Pid: pid, State: f[0][0], Comm: s[open+1 : end]}
	st.PPid, _ = strconv.Atoi(f[1])
	st.Pgid, _ = strconv.Atoi(f[2])
	st.Sid, _ = strconv.Atoi(f[3])
	return st, nil
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	st, err := ProcStat(pid)
	return err == nil && st.State != 'Z'
}

// Children lists the pids whose parent is pid, over all of its threads.
func Children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []int
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(data)) {
			if k, err := strconv.Atoi(field); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

// ReadPid reads a pid file.
func ReadPid(t testing.TB, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("pid file %s holds %q", path, data)
	}
	return pid
}

// ExpectGone waits for pid to exit (a zombie counts as gone: reaping it is its parent's job) and
// fails the test if it does not. A survivor is killed so that it does not outlive the test.
func ExpectGone(t testing.TB, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for Alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("%s (pid %d) is still running", what, pid)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mountsBelow(dir string) ([]string, error) {
	return driver.MountsUnder(dir)
}

// NewDriver returns a driver for shim with a private state directory, namespace "test" and
// a private socket directory. When the test ends it fails the test for every shim still
// running in that state directory, stops it, and removes the bundles.
func NewDriver(t testing.TB, shim string) *driver.Driver {
	t.Helper()
	dir := TempDir(t)
	d := driver.New(filepath.Join(dir, "state"), "test", shim)
	d.Env = []string{"SHIMWALK_SOCKET_DIR=" + filepath.Join(dir, "s")}
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
		data, err := os.ReadFile(filepath.Join(d.Bundle(id), "shim.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err == nil && Alive(pid) {
			t.Errorf("shim for %s (pid %d) outlived the test", id, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
