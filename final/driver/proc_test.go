// SPDX-License-Identifier: Apache-2.0

package driver

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcesses: the table holds a live child with this process as its parent and its command
// line, and a child that exited and is not reaped yet as a zombie, which ProcessesWhere leaves
// out.
func TestProcesses(t *testing.T) {
	live := exec.Command("sleep", "1000")
	exited := exec.Command("true")
	for _, cmd := range []*exec.Cmd{live, exited} {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = live.Process.Kill()
		_ = live.Wait()
		_ = exited.Wait()
	})
	// Waiting with WNOWAIT returns once the child has exited and leaves it unreaped until the
	// cleanup: a zombie, which /proc shows.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, exited.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}

	procs := Processes()
	if p, ok := procs[live.Process.Pid]; !ok || p.PPid != os.Getpid() || p.State == 'Z' || p.Command != "sleep 1000" {
		t.Errorf("the live child: %+v (listed %v), want parent %d, not a zombie, command \"sleep 1000\"", p, ok, os.Getpid())
	}
	if p, ok := procs[exited.Process.Pid]; !ok || p.PPid != os.Getpid() || p.State != 'Z' {
		t.Errorf("the exited child: %+v (listed %v), want parent %d, a zombie", p, ok, os.Getpid())
	}
	if _, ok := procs[os.Getpid()]; !ok {
		t.Errorf("the table leaves out this process %d", os.Getpid())
	}

	all := ProcessesWhere(func([]string) bool { return true })
	if !slices.Contains(all, live.Process.Pid) || slices.Contains(all, exited.Process.Pid) || slices.Contains(all, os.Getpid()) {
		t.Errorf("ProcessesWhere(any) = %v, want the live child %d, neither the zombie %d nor this process", all, live.Process.Pid, exited.Process.Pid)
	}
}
