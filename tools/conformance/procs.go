// SPDX-License-Identifier: Apache-2.0

// Which processes a run of the suite left, found by ancestry rather than by name: the tool is a
// child subreaper, so the suite's containerd and the shims it daemonizes (containerd v2.4's
// shim manager start, which double-forks them into sessions of their own) re-parent to the tool
// instead of init, and ending a run's leftovers means ending the tool's own descendants.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/driver"
)

// becomeSubreaper makes orphans below the tool its children, so that a run's daemonized shims
// stay in its process tree and their exits can be reaped here.
func becomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

// descendants are the processes whose chain of parents leads to root, root excluded.
func descendants(tab map[int]driver.Proc, root int) []int {
	var out []int
	for pid := range tab {
		seen := 0
		for p := tab[pid].PPid; p > 0 && seen < len(tab); p, seen = tab[p].PPid, seen+1 {
			if p == root {
				out = append(out, pid)
				break
			}
			if _, ok := tab[p]; !ok {
				break
			}
		}
	}
	return out
}

// endDescendants kills every descendant of the tool and reaps them: those it kills re-parent
// their own children to the tool, so it goes round until none is left. It is called only
// when the tool waits for no child of its own (the suite's process has been waited for), so
// that no exit status is taken from os/exec. It says what it ended.
func endDescendants() []string {
	self := os.Getpid()
	var ended []string
	for round := 0; round < 100; round++ {
		tab := driver.Processes()
		pids := descendants(tab, self)
		if len(pids) == 0 {
			return ended
		}
		for _, pid := range pids {
			if tab[pid].State != 'Z' {
				c := cmdline(pid)
				if err := unix.Kill(pid, unix.SIGKILL); err == nil {
					ended = append(ended, fmt.Sprintf("process %d (%s)", pid, c))
				}
			}
		}
		// Only the tool's direct children can be waited for; a killed grandchild's children
		// become direct children, and are waited for in the next round.
		for _, pid := range pids {
			if tab[pid].PPid == self {
				var ws unix.WaitStatus
				for {
					_, err := unix.Wait4(pid, &ws, 0, nil)
					if !errors.Is(err, unix.EINTR) {
						break
					}
				}
			}
		}
	}
	return append(ended, "descendants still appear after 100 rounds of killing them")
}

// reapExited reaps the tool's exited children other than keep (the suite's process, which
// os/exec waits for): the shims of a run that ended normally, re-parented to the tool, would
// otherwise stay zombies until the run's cleanup.
func reapExited(keep int) {
	self := os.Getpid()
	for pid, p := range driver.Processes() {
		if p.PPid == self && p.State == 'Z' && pid != keep {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// staleSuiteProcesses are the processes of an earlier run that was killed before it could clean
// up: they are not the tool's descendants, so they are picked by what only the suite starts, and
// narrowly: a containerd whose --root or --state is the suite's fixed path, and a shim whose
// -address is the suite's socket. A process that merely names those paths (a `tail -f` of a log
// below them) is left alone. The suite's lock (suiteLock) is held, so no other run of the suite
// owns these.
func staleSuiteProcesses() []int {
	return driver.ProcessesWhere(isSuiteProcess)
}

// isSuiteProcess is whether args are those of the suite's containerd or of a shim it started.
func isSuiteProcess(args []string) bool {
	if len(args) == 0 {
		return false
	}
	name := filepath.Base(args[0])
	switch {
	case name == "containerd":
		return driver.FlagValue(args, "root") == suiteRoot || driver.FlagValue(args, "state") == suiteState
	case strings.HasPrefix(name, "containerd-shim-"):
		return driver.FlagValue(args, "address") == suiteState+"/containerd.sock"
	}
	return false
}

// suiteCgroups are the cgroup directories of the suite's namespaces in hierarchies that exist
// now: containerd puts a container's cgroup below its namespace, and the suite uses "testing"
// and, for some tests, "testing-<test>".
func suiteCgroups(hierarchies []string) map[string]bool {
	set := map[string]bool{}
	for _, h := range hierarchies {
		nss, _ := filepath.Glob(filepath.Join(h, suiteNamespace+"-*"))
		for _, ns := range append(nss, filepath.Join(h, suiteNamespace)) {
			_ = filepath.WalkDir(ns, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					set[p] = true
				}
				return nil
			})
		}
	}
	return set
}
