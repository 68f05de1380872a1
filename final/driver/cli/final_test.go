// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

const finalShim = "final/cmd/containerd-shim-shimwalk-v2"

// detached starts task id running argv on the final shim with run -d, tracked for cleanup,
// and returns its pid.
func (s *shimctl) detached(id string, argv ...string) int {
	s.t.Helper()
	s.track(id)
	r := s.run(append([]string{"run", "-d", "--rootfs", testkit.Rootfs(s.t), id, "--"}, argv...)...)
	pid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if r.Code != 0 || err != nil {
		s.t.Fatalf("run -d %s: exit %d, stdout %q, stderr %q", id, r.Code, r.Stdout, r.Stderr)
	}
	return pid
}

func TestExecAndPs(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	s.detached("ex", "sleep", "1000")

	r := s.run("task", "exec", "ex", "--", "sh", "-c", "echo out; echo err >&2; exit 6")
	if r.Code != 6 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("exec: exit %d, stdout %q, stderr %q; want 6, \"out\\n\", \"err\\n\"", r.Code, r.Stdout, r.Stderr)
	}

	r = s.run("task", "exec", "-d", "--exec-id", "bg", "ex", "--", "sleep", "1000")
	execPid := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || execPid == "" {
		t.Fatalf("exec -d: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = s.run("task", "ps", "ex")
	found := false
	for _, l := range strings.Split(r.Stdout, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == execPid {
			found = f[1] == "bg"
		}
	}
	if r.Code != 0 || !found {
		t.Errorf("ps: exit %d, want %s with exec id bg:\n%s%s", r.Code, execPid, r.Stdout, r.Stderr)
	}
	if r := s.run("task", "kill", "-s", "KILL", "--exec-id", "bg", "ex"); r.Code != 0 {
		t.Errorf("kill --exec-id: exit %d: %s", r.Code, r.Stderr)
	}
	pid, _ := strconv.Atoi(execPid)
	testkit.ExpectGone(t, pid, "the killed exec")
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	s.detached("pr", "sleep", "1000")
	if r := s.run("task", "pause", "pr"); r.Code != 0 {
		t.Fatalf("pause: exit %d: %s", r.Code, r.Stderr)
	}
	s.status("pr", "PAUSED")
	if r := s.run("task", "resume", "pr"); r.Code != 0 {
		t.Fatalf("resume: exit %d: %s", r.Code, r.Stderr)
	}
	s.status("pr", "RUNNING")
}

func TestStatsUpdate(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	pid := s.detached("su", "sleep", "1000")

	r := s.run("task", "stats", "su")
	fields := map[string][]string{}
	for _, l := range strings.Split(r.Stdout, "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			fields[f[0]] = f[1:]
		}
	}
	if r.Code != 0 || len(fields["memory"]) == 0 || strings.HasPrefix(fields["memory"][0], "0") {
		t.Errorf("stats: exit %d, want a non-zero memory usage:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if n, err := strconv.Atoi(first(fields["pids"])); err != nil || n < 1 {
		t.Errorf("stats: want pids >= 1:\n%s", r.Stdout)
	}
	r = s.run("task", "stats", "--json", "su")
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &raw); r.Code != 0 || err != nil || raw["memory"] == nil {
		t.Errorf("stats --json: exit %d, %v, want metrics with memory:\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}

	if r := s.run("task", "update", "--memory", "48m", "--cpus", "0.5", "su"); r.Code != 0 {
		t.Fatalf("update: exit %d: %s", r.Code, r.Stderr)
	}
	cg := memoryCgroup(t, pid)
	if got := strings.TrimSpace(readFile(filepath.Join(cg, "memory.limit_in_bytes"))); got != strconv.Itoa(48<<20) {
		t.Errorf("%s/memory.limit_in_bytes = %q, want %d", cg, got, 48<<20)
	}
	expectError(t, "update --memory lots", s.run("task", "update", "--memory", "lots", "su"), 2, `size "lots"`)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// memoryCgroup is the directory of pid's cgroup v1 memory controller.
func memoryCgroup(t *testing.T, pid int) string {
	t.Helper()
	for _, l := range strings.Split(readFile(fmt.Sprintf("/proc/%d/cgroup", pid)), "\n") {
		// 4:memory:/shimwalk/default/su
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && (parts[1] == "memory" || strings.Contains(","+parts[1]+",", ",memory,")) {
			return filepath.Join("/sys/fs/cgroup/memory", parts[2])
		}
	}
	t.Fatalf("no memory cgroup for %d in /proc/%d/cgroup", pid, pid)
	return ""
}

// TestCheckpointFailsInOneLine: CRIU fails where it lacks privileges or kernel support, and
// what it says must reach the user as one line, with the task left running.
func TestCheckpointFailsInOneLine(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	s.detached("cp", "sleep", "1000")
	image := filepath.Join(testkit.TempDir(t), "image")
	r := s.run("task", "checkpoint", "--image-path", image, "cp")
	if r.Code == 0 {
		// CRIU works on this machine: the dump is there and the task, without --exit, runs on.
		if _, err := os.Stat(image); err != nil || !strings.Contains(r.Stdout, "checkpointed cp") {
			t.Errorf("checkpoint succeeded with stdout %q, but the image: %v", r.Stdout, err)
		}
		s.status("cp", "RUNNING")
		return
	}
	expectError(t, "checkpoint", r, 1, "checkpoint: ")
	if !strings.Contains(r.Stderr, "criu") && !strings.Contains(r.Stderr, "runc") {
		t.Errorf("checkpoint: stderr %q carries neither CRIU's message nor runc's", r.Stderr)
	}
	s.status("cp", "RUNNING")
}

func TestKillAll(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	pid := s.detached("ka", "sleep", "1000")
	r := s.run("task", "exec", "-d", "--exec-id", "e1", "ka", "--", "sleep", "1000")
	execPid, _ := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if r.Code != 0 || execPid == 0 {
		t.Fatalf("exec -d: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := s.run("task", "kill", "--all", "-s", "KILL", "ka"); r.Code != 0 {
		t.Fatalf("kill --all: exit %d: %s", r.Code, r.Stderr)
	}
	if line := s.status("ka", "STOPPED"); !strings.Contains(line, " exit 137 ") {
		t.Errorf("state after kill --all: %q, want exit 137", line)
	}
	testkit.ExpectGone(t, pid, "the init")
	testkit.ExpectGone(t, execPid, "the exec")
}

func TestStepAwareUnimplemented(t *testing.T) {
	t.Parallel()
	testkit.RequireRoot(t)
	s := newShimctl(t, "steps/02-ttrpc")
	s.track("st02")
	r := s.run("task", "create", "--rootfs", testkit.Rootfs(t), "st02", "--", "true")
	expectError(t, "task create on step 02", r, 1, "step 02 does not implement Create yet; it arrives in step 03")
	if _, err := os.Stat(filepath.Join(s.namespaced, "st02")); err == nil {
		t.Errorf("the failed create left its bundle")
	}
}

func TestRuntimeName(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	s.track("rt")
	// Without --shim: the runtime name alone finds the shim on PATH.
	env := append(s.env, "PATH="+filepath.Dir(s.shim)+":"+os.Getenv("PATH"))
	r := testkit.Run(t, "", env, s.bin, "--state", s.state, "--runtime", "io.containerd.shimwalk.v2",
		"run", "--rm", "--rootfs", testkit.Rootfs(t), "rt", "--", "sh", "-c", "echo via runtime; exit 4")
	if r.Code != 4 || r.Stdout != "via runtime\n" {
		t.Errorf("run with --runtime: exit %d, stdout %q, stderr %q; want 4 and the container's output", r.Code, r.Stdout, r.Stderr)
	}
	s.expectNoTask("rt")
	expectRefused(t, s.runBare, []refusal{
		{[]string{"--runtime", "shimwalk", "run", "x", "--", "true"}, 2, "io.containerd.shimwalk.v2"},
		{[]string{"--runtime", "io.containerd.nosuch.v2", "run", "x", "--", "true"}, 1, "no containerd-shim-nosuch-v2"},
	})
	expectError(t, "--shim with --runtime", s.run("--runtime", "io.containerd.shimwalk.v2", "run", "x", "--", "true"), 2, "do not go together")
}

func TestUsageOfTaskCommands(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	expectRefused(t, s.run, []refusal{
		{[]string{"task", "exec", "x", "sh"}, 2, "after --"},
		{[]string{"task", "exec", "-d", "-t", "x", "--", "sh"}, 2, "-d and -t"},
		{[]string{"task", "exec", "--exec-id", "../e", "x", "--", "sh"}, 2, `exec id "../e"`},
		{[]string{"task", "exec", "nosuch", "--", "sh"}, 1, `no task "nosuch"`},
		{[]string{"task", "update", "x"}, 2, "--memory or --cpus"},
		{[]string{"task", "update", "--cpus", "-1", "x"}, 2, "positive number of cpus"},
		{[]string{"task", "checkpoint", "x"}, 2, "--image-path"},
		{[]string{"task", "kill", "--all", "--exec-id", "e", "x"}, 2, "do not go together"},
		{[]string{"task", "ps", "nosuch"}, 1, `no task "nosuch"`},
		{[]string{"task", "stats", "nosuch"}, 1, `no task "nosuch"`},
		{[]string{"run", "-t", "-d", "x", "--", "sh"}, 2, "-d and -t"},
		{[]string{"run", "-t", "x", "--", "sh"}, 2, "needs a terminal"},
	})
	s.expectNoBundles()
}

// TestRuntimeBinary: --runtime-binary reaches the shim as the runc options' BinaryName, which
// the shim then runs in place of runc.
func TestRuntimeBinary(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	s.track("rb")
	missing := filepath.Join(testkit.TempDir(t), "no-such-runtime")
	r := s.run("run", "--rm", "--runtime-binary", missing, "--rootfs", testkit.Rootfs(t), "rb", "--", "true")
	expectError(t, "run --runtime-binary", r, 1, missing)
	s.expectNoTask("rb")
}

// TestStepAwareForTheTasksShim: the step named is that of the shim that started the task, as its
// bundle records, even when the command names no shim.
func TestStepAwareForTheTasksShim(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step04)
	s.detached("st04", "sleep", "1000")
	expectRefused(t, s.runBare, []refusal{
		{[]string{"task", "pause", "st04"}, 1, "step 04 does not implement Pause yet; it arrives in the final shim"},
		{[]string{"task", "exec", "st04", "--", "true"}, 1, "step 04 does not implement Exec yet; it arrives in the final shim"},
	})
}

// TestSignalDuringStartIsForwarded: a signal that reaches run while Start's reply is still on
// its way is the container's, since the container already runs; it must not abort the run. A
// runc whose start answers two seconds late holds the reply back while the container speaks.
func TestSignalDuringStartIsForwarded(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	slow := filepath.Join(testkit.TempDir(t), "slow-start-runc")
	testkit.WriteExecutable(t, slow, []byte("#!/bin/sh\nrunc \"$@\"\nrc=$?\n"+
		"case \" $* \" in *\" start \"*) sleep 2;; esac\nexit $rc\n"))
	s.expectTERMForwarded(t, "sigstart", "--runtime-binary", slow)
}

// TestRunLogURI: run -d --log sends the URI as the task's stdout and stderr, as containerd
// sends a log URI, and the shim writes both streams to the file. Without -d there is nowhere
// for the URI to go beside shimctl's own output, and run refuses before making anything.
func TestRunLogURI(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	log := filepath.Join(testkit.TempDir(t), "task.log")
	s.track("logged")
	r := s.run("run", "-d", "--log", "file://"+log, "--rootfs", testkit.Rootfs(t), "logged", "--", "sh", "-c", "echo out; echo err >&2")
	if r.Code != 0 {
		t.Fatalf("run -d --log: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if r := s.run("task", "wait", "logged"); r.Code != 0 {
		t.Fatalf("task wait: exit %d, stderr %q", r.Code, r.Stderr)
	}
	// Delete waits for the copies into the file to end.
	if r := s.run("task", "delete", "logged"); r.Code != 0 {
		t.Fatalf("task delete: exit %d, stderr %q", r.Code, r.Stderr)
	}
	lines := strings.Fields(readFile(log))
	if len(lines) != 2 || !slices.Contains(lines, "out") || !slices.Contains(lines, "err") {
		t.Errorf("the log file holds %q, want the lines out and err", readFile(log))
	}
	s.expectNoTask("logged")

	s.track("nolog")
	r = s.run("run", "--log", "file://"+log, "--rootfs", testkit.Rootfs(t), "nolog", "--", "true")
	expectError(t, "run --log without -d", r, 2, "--log needs -d")
	s.expectNoTask("nolog")
}

// TestFailedCallNamesItself: a call the shim refuses is reported under the name of the call, in
// front of the shim's own message (which here does not name it).
func TestFailedCallNamesItself(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	s.detached("named", "sleep", "1000")
	r := s.run("task", "kill", "--exec-id", "nosuch", "named")
	expectError(t, "kill of an unknown exec", r, 1, "shimctl: kill: exec nosuch in task named: not found")
}
