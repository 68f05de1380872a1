// SPDX-License-Identifier: Apache-2.0

// Package e2e runs the final shim under real containerd, Debian's 1.6 and the releases built from
// the module proxy (scripts/containerd2.sh), with runc and with crun, through ctr exactly as an
// operator would. The full suites run under 1.6 and 2.4; TestGenerations runs the operator's
// smoke under every release of the matrix.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// env is one containerd with one runc-compatible binary.
type env struct {
	t      *testing.T
	c      *testkit.Containerd
	shim   string
	rootfs string
	runc   string // "" for runc, or "crun"
	config string // the runtime config naming runc's replacement
	prefix string // for container ids: each suite its own
}

func newEnv(t *testing.T, c *testkit.Containerd, runc, prefix string) *env {
	testkit.RequireCommand(t, "runc", "crun")
	e := &env{t: t, c: c, shim: testkit.Binary(t, "final/cmd/containerd-shim-shimwalk-v2"), rootfs: testkit.Rootfs(t), runc: runc, prefix: prefix}
	if runc != "" {
		// ctr passes --runc-binary only to io.containerd.runc.v2; for any other runtime the
		// options travel as a runtime config file, as a CRI runtime handler's would.
		e.config = filepath.Join(testkit.TempDir(t), "runtime.toml")
		if err := os.WriteFile(e.config, []byte("BinaryName = \""+runc+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// fifoDir is where ctr makes the stdio FIFOs of this suite's containers.
func (e *env) fifoDir() string {
	return filepath.Join(e.c.Dir, "fifo-"+e.prefix)
}

// id is a container id unique to this suite.
func (e *env) id(name string) string { return e.prefix + "-" + name }

// runArgs is `ctr run` with the shim, the runtime binary and flags, all before --rootfs, whose
// path is positional.
func (e *env) runArgs(flags ...string) []string {
	// ctr's FIFOs go to a directory of the suite's, so that none left behind goes unnoticed.
	args := append([]string{"run", "--runtime", e.shim, "--fifo-dir", e.fifoDir()}, flags...)
	if e.config != "" {
		args = append(args, "--runtime-config-path", e.config)
	}
	return append(args, "--rootfs", e.rootfs)
}

// runDetached is how most tests open: `ctr run -d` of id with flags, running args, and the task
// RUNNING.
func (e *env) runDetached(id string, flags []string, args ...string) {
	e.t.Helper()
	run := append(e.runArgs(append([]string{"-d"}, flags...)...), id)
	if r := e.ctr(append(run, args...)...); r.Code != 0 {
		e.t.Fatalf("ctr run -d %s: %s", id, r.Stderr)
	}
	e.waitStatus(id, "RUNNING")
}

func (e *env) ctr(args ...string) testkit.Result {
	e.t.Helper()
	return e.c.Ctr(e.t, args...)
}

// container is the id of a container of this suite named name, removed whatever its state when
// the test ends.
func (e *env) container(name string) string {
	id := e.id(name)
	e.cleanup(id)
	return id
}

// cleanup removes a container whatever state it is in.
func (e *env) cleanup(ids ...string) {
	e.t.Cleanup(func() {
		for _, id := range ids {
			e.c.Ctr(e.t, "task", "kill", "-s", "KILL", id)
			e.c.Ctr(e.t, "task", "delete", "--force", id)
			e.c.Ctr(e.t, "container", "delete", id)
		}
	})
}

// waitStatus polls `ctr task ls` until id shows status.
func (e *env) waitStatus(id, status string) {
	e.t.Helper()
	var ls testkit.Result
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ls = e.ctr("task", "ls"); hasRow(ls.Stdout, id, status) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s never became %s; ctr task ls:\n%s%s", id, status, ls.Stdout, ls.Stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// execOutput runs an exec in id that prints and exits 4, and checks that ctr passes on both.
func (e *env) execOutput(id string) {
	e.t.Helper()
	r := e.ctr("task", "exec", "--fifo-dir", e.fifoDir(), "--exec-id", "e1", id, "/bin/sh", "-c", "echo in-exec; exit 4")
	if r.Code != 4 || r.Stdout != "in-exec\n" {
		e.t.Errorf("ctr task exec: exit %d, stdout %q; want 4, in-exec", r.Code, r.Stdout)
	}
}

// killDelete ends a running id as an operator does: ctr task kill -s KILL, then deleteKilled.
func (e *env) killDelete(id string) {
	e.t.Helper()
	if r := e.ctr("task", "kill", "-s", "KILL", id); r.Code != 0 {
		e.t.Fatalf("ctr task kill %s: %s", id, r.Stderr)
	}
	e.deleteKilled(id)
}

// deleteKilled waits for id, killed by SIGKILL, to stop, deletes its task, which must report exit
// status 137, then its container, and waits until no shim serves id.
func (e *env) deleteKilled(id string) {
	e.t.Helper()
	e.waitStatus(id, "STOPPED")
	if r := e.ctr("task", "delete", id); r.Code != 0 || !exitStatus("137").MatchString(r.Stdout+r.Stderr) {
		e.t.Errorf("ctr task delete %s: exit %d, %q; want exit status 137", id, r.Code, r.Stdout+r.Stderr)
	}
	e.ctr("container", "delete", id)
	e.noShimLeft(id)
}

// noShimLeft waits until no shim serves id any more.
func (e *env) noShimLeft(id string) {
	e.t.Helper()
	testkit.Eventually(e.t, 10*time.Second, "a shim is left for "+id, func() bool { return len(e.c.Shims(id)) == 0 })
}

// hasRow reports whether some line of out has all of words as fields.
func hasRow(out string, words ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		fields := " " + strings.Join(strings.Fields(line), " ") + " "
		all := true
		for _, w := range words {
			all = all && strings.Contains(fields, " "+w+" ")
		}
		if all {
			return true
		}
	}
	return false
}

func binaryName(runc string) string {
	if runc == "" {
		return "runc"
	}
	return runc
}

var exitStatus = func(n string) *regexp.Regexp { return regexp.MustCompile(`exit (code|status) ` + n + `\b`) }

// suite is everything an operator does with a runtime, on one containerd.
func suite(t *testing.T, e *env) {
	t.Run("RunRm", e.testRunRm)
	t.Run("ExecAndPs", e.testExecAndPs)
	t.Run("PauseResume", e.testPauseResume)
	t.Run("Metrics", e.testMetrics)
	t.Run("OOM", e.testOOM)
	t.Run("OOMExec", e.testOOMExec)
	t.Run("Update", e.testUpdate)
	t.Run("KillDelete", e.testKillDelete)
	t.Run("PodPidNamespace", e.testPodPidNamespace)
	t.Run("Terminal", e.testTerminal)
	t.Run("LogURI", e.testLogURI)
	t.Run("Group", e.testGroup)
	t.Run("ShimCgroup", e.testShimCgroup)
	t.Run("Restart", e.testRestart)
	t.Run("NothingLeft", e.testNothingLeft)
}

func (e *env) sub(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

func (e *env) testRunRm(t *testing.T) {
	e = e.sub(t)
	id := e.container("rm")
	r := e.ctr(append(e.runArgs("--rm"), id, "/bin/sh", "-c", "echo out; echo err >&2; exit 3")...)
	if r.Code != 3 || r.Stdout != "out\n" || !strings.Contains(r.Stderr, "err\n") {
		t.Errorf("ctr run --rm: exit %d, stdout %q, stderr %q; want 3, out, err", r.Code, r.Stdout, r.Stderr)
	}
	e.noShimLeft(id)
}

func (e *env) testExecAndPs(t *testing.T) {
	e = e.sub(t)
	id := e.container("exec")
	e.runDetached(id, nil, "/bin/sleep", "100")
	// The runtime options reached runc's replacement: the container is in its state, not runc's.
	if known := testkit.RuncContainersAt(t, e.c.RuncRoot, e.c.Namespace, e.runc); !slices.Contains(known, id) {
		t.Errorf("%s does not know %s: %v", binaryName(e.runc), id, known)
	}
	e.execOutput(id)
	// A detached exec shows up in ps with its exec id. ctr leaves a detached exec's FIFOs for
	// good (no ctr stays to remove them), so they go to a directory NothingLeft does not check.
	detached := testkit.TempDir(t)
	if r := e.ctr("task", "exec", "--fifo-dir", detached, "-d", "--exec-id", "bg", id, "/bin/sleep", "100"); r.Code != 0 {
		t.Fatalf("ctr task exec -d: %s", r.Stderr)
	}
	var ps testkit.Result
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last ctr task ps: %q %q", ps.Stdout, ps.Stderr)
		}
	})
	testkit.Eventually(t, 10*time.Second, "ctr task ps never listed the exec bg", func() bool {
		ps = e.ctr("task", "ps", id)
		// containerd 1.6's ctr prints the details Go-style, 2.x's as protobuf text.
		return regexp.MustCompile(`(ExecID:|exec_id:\s*")bg\b`).MatchString(ps.Stdout)
	})
	// An exec id is taken until that exec is deleted.
	if r := e.ctr("task", "exec", "--fifo-dir", detached, "-d", "--exec-id", "bg", id, "/bin/true"); r.Code == 0 || !strings.Contains(r.Stderr, "already exists") {
		t.Errorf("a second exec with the id bg: exit %d, %q; want already exists", r.Code, r.Stderr)
	}
	e.killDelete(id)
}

func (e *env) testPauseResume(t *testing.T) {
	e = e.sub(t)
	id := e.container("pause")
	seen := e.watchEvents(t)
	e.runDetached(id, nil, "/bin/sleep", "100")
	if r := e.ctr("task", "pause", id); r.Code != 0 {
		t.Fatalf("ctr task pause: %s", r.Stderr)
	}
	e.waitStatus(id, "PAUSED")
	if r := e.ctr("task", "resume", id); r.Code != 0 {
		t.Fatalf("ctr task resume: %s", r.Stderr)
	}
	e.waitStatus(id, "RUNNING")
	e.waitTopics(seen, id, "/tasks/paused", "/tasks/resumed")
}

// testMetrics reads a running container's cgroup metrics with ctr task metrics.
func (e *env) testMetrics(t *testing.T) {
	e = e.sub(t)
	id := e.container("metrics")
	e.runDetached(id, nil, "/bin/sh", "-c", "sleep 100 & sleep 100 & wait")
	var r testkit.Result
	value := func(metric string) int {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(metric) + `\s+(\d+)`).FindStringSubmatch(r.Stdout)
		if m == nil {
			return -1
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last ctr task metrics: %q %q", r.Stdout, r.Stderr)
		}
	})
	// The task is RUNNING once sh runs; its two sleeps come after, when sh gets to fork them.
	testkit.Eventually(t, 10*time.Second, "ctr task metrics never counted sh and its two sleeps", func() bool {
		r = e.ctr("task", "metrics", id)
		return r.Code == 0 && value("pids.current") >= 3
	})
	if v := value("memory.usage_in_bytes"); v <= 0 {
		t.Errorf("memory.usage_in_bytes = %d, want > 0:\n%s", v, r.Stdout)
	}
}

// watchEvents runs ctr events until the test ends and returns what it prints.
func (e *env) watchEvents(t *testing.T) *testkit.Buffer {
	watch := e.c.CtrCommand(context.Background(), "events")
	seen := &testkit.Buffer{}
	watch.Stdout = seen
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		watch.Process.Kill()
		watch.Wait()
		if t.Failed() {
			t.Logf("ctr events:\n%s", seen.String())
		}
	})
	return seen
}

// waitTopics waits until ctr events showed, of the topics in want, exactly want for container id,
// in that order (a topic may come more than once).
func (e *env) waitTopics(seen *testkit.Buffer, id string, want ...string) {
	e.t.Helper()
	topics := slices.Compact(slices.Sorted(slices.Values(want)))
	testkit.Eventually(e.t, 10*time.Second, "ctr events never showed "+strings.Join(want, " then ")+" for "+id, func() bool {
		return topicsOf(seen, id, topics...) == strings.Join(want, " ")
	})
}

// topicsOf lists, in order, the topics among wanted that ctr events showed for container id.
func topicsOf(seen *testkit.Buffer, id string, wanted ...string) string {
	var topics []string
	for _, line := range strings.Split(seen.String(), "\n") {
		if !strings.Contains(line, `"container_id":"`+id+`"`) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if slices.Contains(wanted, f) {
				topics = append(topics, f)
			}
		}
	}
	return strings.Join(topics, " ")
}

// testOOM runs a container past a 32 MiB memory limit: containerd learns /tasks/oom, then
// /tasks/exit with 137, in that order, and ctr run exits 137.
func (e *env) testOOM(t *testing.T) {
	e = e.sub(t)
	id := e.container("oom")
	seen := e.watchEvents(t)
	// tail keeps the last lines of its input, and /dev/zero has no line end: it grows until
	// the OOM killer ends it.
	r := e.ctr(append(e.runArgs("--rm", "--memory-limit", "33554432"), id, "/bin/tail", "/dev/zero")...)
	if r.Code != 137 {
		t.Errorf("ctr run past the memory limit exited %d, want 137: %s", r.Code, r.Stderr)
	}
	e.waitTopics(seen, id, "/tasks/oom", "/tasks/exit")
}

func (e *env) testKillDelete(t *testing.T) {
	e = e.sub(t)
	id := e.container("kill")
	e.runDetached(id, nil, "/bin/sleep", "100")
	if r := e.ctr("task", "delete", id); r.Code == 0 {
		t.Errorf("ctr task delete of a running task succeeded")
	}
	e.killDelete(id)
}

func (e *env) testLogURI(t *testing.T) {
	e = e.sub(t)
	dir := testkit.TempDir(t)
	// A logging binary as containerd runs one: stdout on fd 3, stderr on fd 4, fd 5 closed when
	// ready (here before anything else, so that no child inherits it), the URI's query as
	// arguments.
	logger := filepath.Join(dir, "logger.sh")
	script := "#!/bin/sh\nexec 5>&-\ncat <&3 >\"$2.out\" & cat <&4 >\"$2.err\" &\nwait\n"
	testkit.WriteExecutable(t, logger, []byte(script))
	base := filepath.Join(dir, "binary")
	id := e.container("logbin")
	r := e.ctr(append(e.runArgs("--rm", "--log-uri", "binary://"+logger+"?to="+base), id, "/bin/sh", "-c", "echo to-binary; echo err-binary >&2")...)
	if r.Code != 0 {
		t.Fatalf("ctr run --log-uri binary://: exit %d: %s", r.Code, r.Stderr)
	}
	testkit.Eventually(t, 10*time.Second, "the logging binary got the output", func() bool {
		out, _ := os.ReadFile(base + ".out")
		errOut, _ := os.ReadFile(base + ".err")
		return string(out) == "to-binary\n" && string(errOut) == "err-binary\n"
	})

	logFile := filepath.Join(dir, "file.log")
	id = e.container("logfile")
	r = e.ctr(append(e.runArgs("--rm", "--log-uri", "file://"+logFile), id, "/bin/sh", "-c", "echo to-file")...)
	if r.Code != 0 {
		t.Fatalf("ctr run --log-uri file://: exit %d: %s", r.Code, r.Stderr)
	}
	if data, err := os.ReadFile(logFile); err != nil || string(data) != "to-file\n" {
		t.Errorf("log file has %q, %v; want to-file", data, err)
	}
}

func (e *env) testGroup(t *testing.T) { e.testGroupBy(t, "io.containerd.shimwalk.v2.group") }

// testSandboxGroup groups by the annotation CRI sets on a pod's containers, as containerd's
// runc shim does.
func (e *env) testSandboxGroup(t *testing.T) { e.testGroupBy(t, "io.kubernetes.cri.sandbox-id") }

// testGroupBy puts two containers into one shim by the annotation label; the shim serves the
// second after the first is deleted, and goes with the last.
func (e *env) testGroupBy(t *testing.T, label string) {
	e = e.sub(t)
	a, b := e.id("grp-a"), e.id("grp-b")
	e.cleanup(a, b)
	group := label + "=" + e.id("pod")
	for _, id := range []string{a, b} {
		e.runDetached(id, []string{"--annotation", group}, "/bin/sleep", "100")
	}
	shims := e.c.Shims(a)
	if len(shims) != 1 || len(e.c.Shims(b)) != 0 {
		t.Fatalf("shims for %s: %v, for %s: %v; want one shim, started for the first", a, shims, b, e.c.Shims(b))
	}
	for _, id := range []string{a, b} {
		pid := testkit.ReadPid(t, filepath.Join(e.c.Bundle(id), bundle.InitPidFile))
		if p, err := driver.ReadProc(pid); err != nil || p.PPid != shims[0] {
			t.Errorf("%s (pid %d) is not a child of the group's shim %d", id, pid, shims[0])
		}
	}
	// Deleting the first container leaves the shim to the second.
	for i, id := range []string{a, b} {
		e.ctr("task", "kill", "-s", "KILL", id)
		e.waitStatus(id, "STOPPED")
		if r := e.ctr("task", "delete", id); r.Code != 0 {
			t.Fatalf("ctr task delete %s: %s", id, r.Stderr)
		}
		e.ctr("container", "delete", id)
		if i == 0 && !driver.Alive(shims[0]) {
			t.Fatalf("the shim went with the first container of its group")
		}
	}
	testkit.ExpectGone(t, shims[0], "the group's shim after its last container")
}

// testShimCgroup names a cgroup in the runtime options: the long-lived shim runs in it.
func (e *env) testShimCgroup(t *testing.T) {
	e = e.sub(t)
	id := e.container("shimcg")
	// Below the test process's cgroup parent, which testkit.Main removes at the end.
	cgroup := "/shimwalk-test/" + filepath.Base(testkit.WorkDir(t)) + "/" + id
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if err := os.MkdirAll(filepath.Join(h, cgroup), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A new v1 cpuset cgroup has no cpus and no memory nodes, and takes no process until it
	// has: give each level its parent's.
	cpuset := "/sys/fs/cgroup/cpuset"
	for _, part := range strings.Split(strings.Trim(cgroup, "/"), "/") {
		next := filepath.Join(cpuset, part)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(cpuset, f)); err == nil {
				os.WriteFile(filepath.Join(next, f), v, 0o644)
			}
		}
		cpuset = next
	}
	t.Cleanup(func() {
		for _, h := range hierarchies {
			os.Remove(filepath.Join(h, cgroup))
		}
	})
	config := filepath.Join(testkit.TempDir(t), "runtime.toml")
	body := fmt.Sprintf("ShimCgroup = %q\n", cgroup)
	if e.runc != "" {
		body += fmt.Sprintf("BinaryName = %q\n", e.runc)
	}
	if err := os.WriteFile(config, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	// runArgs passes the suite's runtime config; this container's adds the cgroup to it.
	withCgroup := *e
	withCgroup.config = config
	withCgroup.runDetached(id, nil, "/bin/sleep", "100")
	shims := e.c.Shims(id)
	if len(shims) != 1 {
		t.Fatalf("shims of %s: %v", id, shims)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", shims[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\d+:memory:` + regexp.QuoteMeta(cgroup) + `$`).Match(data) {
		t.Errorf("the shim is not in %s:\n%s", cgroup, data)
	}
	e.killDelete(id)
}

// testRestart kills containerd under a running container and under one that exits while
// containerd is down: after the restart containerd finds the first running and learns the
// second's exit.
func (e *env) testRestart(t *testing.T) {
	e = e.sub(t)
	running, exiting := e.id("stays"), e.id("exits")
	e.cleanup(running, exiting)
	for _, id := range []string{running, exiting} {
		e.runDetached(id, nil, "/bin/sleep", "100")
	}
	shims := map[string][]int{running: e.c.Shims(running), exiting: e.c.Shims(exiting)}
	e.c.Kill(t)
	pid := testkit.ReadPid(t, filepath.Join(e.c.Bundle(exiting), bundle.InitPidFile))
	syscall.Kill(pid, syscall.SIGKILL)
	testkit.Eventually(t, 10*time.Second, "exit.json never written", func() bool {
		_, err := os.Stat(filepath.Join(e.c.Bundle(exiting), bundle.ExitFile))
		return err == nil
	})
	e.c.Restart(t)
	for id, before := range shims {
		if after := e.c.Shims(id); len(before) != 1 || len(after) != 1 || after[0] != before[0] {
			t.Errorf("%s: shims before the restart %v, after %v", id, before, after)
		}
	}
	e.waitStatus(running, "RUNNING")
	e.deleteKilled(exiting)
	e.killDelete(running)
}

// testNothingLeft checks, after the suite, that no container of it left a trace.
func (e *env) testNothingLeft(t *testing.T) {
	e = e.sub(t)
	testkit.Eventually(t, 10*time.Second, "shims left", func() bool { return len(e.c.Shims("")) == 0 })
	state := filepath.Join(e.c.Dir, "state", "io.containerd.runtime.v2.task", e.c.Namespace)
	if entries, _ := os.ReadDir(state); len(entries) > 0 {
		t.Errorf("bundles left: %v", entries)
	}
	if m := e.c.Mounts(t, e.c.Dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if entries, _ := os.ReadDir(e.c.SocketDir); len(entries) > 0 {
		t.Errorf("sockets left: %v", entries)
	}
	fifos, _ := filepath.Glob(filepath.Join(e.fifoDir(), "*", "*"))
	if len(fifos) > 0 {
		t.Errorf("FIFOs left: %v", fifos)
	}
	for _, id := range testkit.RuncContainersAt(t, e.c.RuncRoot, e.c.Namespace, e.runc) {
		if strings.HasPrefix(id, e.prefix+"-") {
			t.Errorf("%s left in %s's state", id, e.runc)
		}
	}
}

func TestContainerd16(t *testing.T) {
	suite(t, newEnv(t, testkit.StartContainerd(t), "", "c16"))
}

// TestContainerd16Crun runs crun as BinaryName. crun refuses this machine's cgroup layout (v1
// controllers beside a cgroup2 hierarchy that holds one), so its containerd runs in a mount
// namespace with the v1 hierarchies only.
func TestContainerd16Crun(t *testing.T) {
	suite(t, newEnv(t, testkit.StartContainerdCgroupV1(t), "crun", "c16crun"))
}

func TestContainerd2(t *testing.T) {
	e := newEnv(t, testkit.StartContainerd2(t), "", "c2")
	suite(t, e)
	t.Run("RuntimeInfo", e.testRuntimeInfo)
}
