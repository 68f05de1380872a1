// SPDX-License-Identifier: Apache-2.0

// The process table as /proc shows it: who is whose parent, who still runs, and what a process
// was started with, for whoever looks for what a run left behind. Not a mirror of any containerd
// function: containerd tracks its shims by their sockets, not by /proc.

package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Proc is what /proc says about one process: enough to show who is whose parent.
type Proc struct {
	Pid, PPid, Pgid, Sid int
	State                byte // R, S, Z, ...
	Command              string
	Children             []int
}

// ReadProc reads /proc/pid/stat, cmdline and children.
func ReadProc(pid int) (Proc, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Proc{}, err
	}
	// comm may hold spaces and parentheses; the fields after it start at the last ')'.
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < 0 || end+2 >= len(s) {
		return Proc{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[end+2:])
	if len(f) < 4 {
		return Proc{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	p := Proc{Pid: pid, State: f[0][0], Command: "[" + s[open+1:end] + "]"}
	p.PPid, _ = strconv.Atoi(f[1])
	p.Pgid, _ = strconv.Atoi(f[2])
	p.Sid, _ = strconv.Atoi(f[3])
	if args := Cmdline(pid); len(args) > 0 {
		p.Command = strings.Join(args, " ")
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, field := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(field); err == nil {
				p.Children = append(p.Children, c)
			}
		}
	}
	return p, nil
}

// Alive reports whether pid exists and is not a zombie. The leader of a multi-threaded process
// turns zombie before its other threads are done exiting, and until they are, its files (a
// listening socket, say) are still open: such a process counts as alive.
func Alive(pid int) bool {
	p, err := ReadProc(pid)
	if err != nil {
		return false
	}
	if p.State != 'Z' {
		return true
	}
	threads, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	return len(threads) > 1
}

// ProcessesWhere lists the live processes (zombies and this process left out) whose command
// line satisfies match: how a caller finds what a run left behind from the paths in its
// arguments, whoever its parent now is.
func ProcessesWhere(match func(args []string) bool) []int {
	var pids []int
	for _, pid := range listPids() {
		if pid == os.Getpid() || !Alive(pid) {
			continue
		}
		if args := Cmdline(pid); len(args) > 0 && match(args) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Processes is every process /proc shows, zombies included, by pid: a caller that follows
// parents needs them all as of one moment.
func Processes() map[int]Proc {
	procs := map[int]Proc{}
	for _, pid := range listPids() {
		if p, err := ReadProc(pid); err == nil {
			procs[pid] = p
		}
	}
	return procs
}

// listPids lists the process ids in /proc.
func listPids() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Cmdline is pid's argument list; nil once it is gone.
func Cmdline(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// FlagValue is the value of -name or --name in args, in the "-name v" or the "-name=v" form;
// "" when args do not set it.
func FlagValue(args []string, name string) string {
	for i := 1; i < len(args); i++ {
		for _, f := range []string{"-" + name, "--" + name} {
			if args[i] == f && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(args[i], f+"="); ok {
				return v
			}
		}
	}
	return ""
}
