// SPDX-License-Identifier: Apache-2.0

// What a run left behind (Leftovers), and a runc that fails on purpose (FaultyRunc): a
// wrapper given to the shim as its BinaryName that fails, hangs, dies or blocks at the runc
// subcommand a test picks, so that failure paths and races happen every time, not by chance.
// Not a mirror of any containerd function: containerd's tests have no such runc.

package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
)

// Leftovers lists what task id of this containerd left behind once it is gone: a shim, a
// bundle, runc state, a mount, a cgroup, a live process among pids, or anything in the shims'
// socket directory (with others, a test that shares the containerd passes sockets=false).
func (c *Containerd) Leftovers(t testing.TB, id string, sockets bool, pids ...int) []string {
	t.Helper()
	var left []string
	if shims := c.Shims(id); len(shims) > 0 {
		left = append(left, fmt.Sprintf("shim %v", shims))
	}
	if _, err := os.Lstat(c.Bundle(id)); err == nil {
		left = append(left, "bundle "+c.Bundle(id))
	}
	if slices.Contains(RuncContainersAt(t, c.RuncRoot, c.Namespace, ""), id) {
		left = append(left, "runc state")
	}
	if m := c.Mounts(t, c.Bundle(id)); len(m) > 0 {
		left = append(left, fmt.Sprintf("mounts %v", m))
	}
	cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", c.Namespace, id))
	left = append(left, cgroups...)
	for _, pid := range pids {
		if pid > 0 && driver.Alive(pid) {
			left = append(left, fmt.Sprintf("process %d", pid))
		}
	}
	if sockets {
		if entries, _ := os.ReadDir(c.SocketDir); len(entries) > 0 {
			left = append(left, fmt.Sprintf("sockets %v", entries))
		}
	}
	return left
}

// Fault is what a FaultyRunc does at a subcommand instead of running it.
type Fault string

const (
	// Fail exits 1 with the message "<subcommand> failing on purpose", as runc does when it
	// refuses.
	Fail Fault = "fail"
	// Hang never returns: the wrapper becomes a sleep that holds runc's pipes.
	Hang Fault = "hang"
	// Die is killed by SIGKILL, as a runc the OOM killer picked would be.
	Die Fault = "die"
	// Block waits until the fault is cleared and then runs the subcommand: a test holds a
	// life-cycle step at that point for as long as it likes, and lets it go on.
	Block Fault = "block"
)

// FaultyRunc is a BinaryName for the shim that runs runc, except at the subcommands (create,
// start, exec, kill, delete) a test disturbs with Set.
type FaultyRunc struct {
	Path string // the executable to name as BinaryName
	dir  string // one file per disturbed subcommand, holding its Fault; and "reached"
}

// faultyScript finds the subcommand after runc's global flags (whose values are paths, never a
// bare subcommand name), records that it got there, and acts on the fault file of that
// subcommand. A failure is logged where runc logs its own, in --log as JSON, and on stderr.
// The sleep of Hang is exec'd so that a kill of the command kills what holds its pipes.
const faultyScript = `#!/bin/sh
dir=%q
sub= log= prev=
for a; do
	if [ "$prev" = --log ]; then log=$a; fi
	case "$a" in create|start|exec|kill|delete) sub=$a; break;; esac
	prev=$a
done
if [ -n "$sub" ] && [ -f "$dir/$sub" ]; then
	read -r fault < "$dir/$sub"
	echo "$sub" >> "$dir/reached"
	case "$fault" in
	fail)
		msg="$sub failing on purpose"
		echo "$msg" >&2
		if [ -n "$log" ]; then
			printf '{"level":"error","msg":"%%s","time":"%%s"}\n' "$msg" "$(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)" >> "$log"
		fi
		exit 1;;
	hang) echo $$ >> "$dir/hung"; exec sleep 3600;;
	die) kill -9 $$;;
	block)
		while [ -f "$dir/$sub" ]; do sleep 0.02; done
		# Released by the test's end rather than by Clear: nobody waits for this runc.
		[ -d "$dir" ] || exit 1;;
	esac
fi
exec runc "$@"
`

// NewFaultyRunc writes a FaultyRunc that does no harm until Set.
func NewFaultyRunc(t testing.TB) *FaultyRunc {
	t.Helper()
	RequireCommand(t, "runc")
	dir := TempDir(t)
	f := &FaultyRunc{Path: filepath.Join(dir, "faulty-runc"), dir: filepath.Join(dir, "faults")}
	if err := os.Mkdir(f.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	WriteExecutable(t, f.Path, []byte(fmt.Sprintf(faultyScript, f.dir)))
	// A hung runc is the shim's to kill; one the shim failed to kill must not outlive the test.
	// Registered after TempDir, so it runs before the directory goes.
	t.Cleanup(func() {
		data, _ := os.ReadFile(filepath.Join(f.dir, "hung"))
		for _, field := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(field)
			if err != nil {
				continue
			}
			if slices.Equal(driver.Cmdline(pid), []string{"sleep", "3600"}) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return f
}

// Set makes every later call of subcommand sub meet fault.
func (f *FaultyRunc) Set(t testing.TB, sub string, fault Fault) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, sub), []byte(string(fault)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Clear lets sub run again, releasing the calls Block holds.
func (f *FaultyRunc) Clear(t testing.TB, sub string) {
	t.Helper()
	if err := os.Remove(filepath.Join(f.dir, sub)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// Reached counts the calls of sub that met a fault so far.
func (f *FaultyRunc) Reached(sub string) int {
	data, _ := os.ReadFile(filepath.Join(f.dir, "reached"))
	n := 0
	for _, line := range strings.Fields(string(data)) {
		if line == sub {
			n++
		}
	}
	return n
}

// WaitReached waits until a call of sub has met its fault: the life cycle is at that point.
func (f *FaultyRunc) WaitReached(t testing.TB, sub string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, "runc "+sub+" was never called", func() bool { return f.Reached(sub) > 0 })
}
