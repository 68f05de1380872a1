// SPDX-License-Identifier: Apache-2.0

// The black-box tests of shimctl, in package cli_test: each builds the real shimctl and a shim,
// and drives them through a private state directory as a user would (this file holds the
// harness). The in-package unit tests, which run no binary, are in cli_test.go.

package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/ttrpc/events/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

const (
	step04 = "steps/04-subreaper"
	step05 = "steps/05-wait-events"
	step06 = "steps/06-reconnect"
	// noWaitNote is what run prints when it falls back from Wait to State.
	noWaitNote = "note: this shim has no Wait (it arrives in step 05); exit status taken from State"
)

// shimctl drives one private state directory through the built shimctl, with the environment
// testkit.NewDriver gives its shims. When the test ends it fails the test for any shim process
// of that state directory still running, and kills it.
type shimctl struct {
	t          *testing.T
	bin, shim  string
	state      string
	env        []string
	sockets    string
	namespaced string // the bundles' directory
}

func newShimctl(t *testing.T, step string) *shimctl {
	t.Helper()
	testkit.RequireRoot(t)
	testkit.RequireCommand(t, "runc", "busybox")
	dir := testkit.TempDir(t)
	s := &shimctl{
		t:       t,
		bin:     testkit.Binary(t, "final/cmd/shimctl"),
		shim:    testkit.Binary(t, step),
		state:   filepath.Join(dir, "state"),
		sockets: filepath.Join(dir, "s"),
	}
	s.namespaced = filepath.Join(s.state, "default")
	s.env = []string{"SHIMWALK_SOCKET_DIR=" + s.sockets, "SHIMWALK_RUNC_ROOT=" + testkit.RuncRoot(t)}
	// Runs after every task's own cleanup (t.Cleanup is last in, first out), before TempDir's.
	t.Cleanup(s.checkNoShims)
	return s
}

// run runs shimctl with args and returns its result.
func (s *shimctl) run(args ...string) testkit.Result {
	s.t.Helper()
	return testkit.Run(s.t, "", s.env, s.bin, append([]string{"--state", s.state, "--shim", s.shim}, args...)...)
}

// runBare runs shimctl with args but without --shim: the shim comes from --runtime, from
// PATH, or from the bundle of the task named.
func (s *shimctl) runBare(args ...string) testkit.Result {
	s.t.Helper()
	return testkit.Run(s.t, "", s.env, s.bin, append([]string{"--state", s.state}, args...)...)
}

// in is s for the subtest t: what it tracks is taken down, and what it checks is reported, as
// t ends.
func (s *shimctl) in(t *testing.T) *shimctl {
	c := *s
	c.t = t
	return &c
}

// command is shimctl with args, to be started by the test.
func (s *shimctl) command(args ...string) *exec.Cmd {
	cmd := exec.Command(s.bin, append([]string{"--state", s.state, "--shim", s.shim}, args...)...)
	cmd.Env = append(os.Environ(), s.env...)
	return cmd
}

// track takes task id down when the test ends, whatever became of it, as a user would:
// task kill -s KILL --all, then task delete once the kill has taken effect. The shim must be
// gone afterwards.
func (s *shimctl) track(id string) {
	s.t.Cleanup(func() {
		dir := filepath.Join(s.namespaced, id)
		if _, err := os.Stat(dir); err != nil {
			return // deleted by the test
		}
		shimPid, _ := bundle.ReadPidFile(filepath.Join(dir, bundle.ShimPidFile))
		s.run("task", "kill", "-s", "KILL", "--all", id)
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := s.run("task", "delete", id)
			// Until the killed init is reaped, step shims answer "kill it first", the final
			// shim "is running".
			running := strings.Contains(r.Stderr, "kill it first") || strings.Contains(r.Stderr, "is running")
			if r.Code == 0 || !running || time.Now().After(deadline) {
				if r.Code != 0 {
					s.t.Errorf("cleanup: task delete %s: %s", id, r.Stderr)
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if shimPid > 0 {
			testkit.ExpectGone(s.t, shimPid, "shim of "+id)
		}
	})
}

// checkNoShims fails the test for every shim started for this state directory that is still
// running. Shims are recognised by the -address that the driver derives from the state.
func (s *shimctl) checkNoShims() {
	// A shim ends by itself shortly after its last Delete and Shutdown, which run --rm does
	// not wait for: it has a moment to go.
	deadline := time.Now().Add(5 * time.Second)
	for len(s.shims()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range s.shims() {
		s.t.Errorf("shim %d outlived the test: %s", pid, strings.Join(driver.Cmdline(pid), " "))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// shims lists the running shims started for this state directory.
func (s *shimctl) shims() []int {
	address := filepath.Join(s.state, "driver.sock")
	return driver.ProcessesWhere(func(args []string) bool { return driver.FlagValue(args, "address") == address })
}

// expectNoTask fails the test if anything of task id is left: one of its processes pids (once
// they had their time to go), bundle, FIFOs, runc state.
func (s *shimctl) expectNoTask(id string, pids ...int) {
	s.t.Helper()
	for _, pid := range pids {
		testkit.ExpectGone(s.t, pid, fmt.Sprintf("process %d of %s", pid, id))
	}
	if _, err := os.Stat(filepath.Join(s.namespaced, id)); !errors.Is(err, os.ErrNotExist) {
		s.t.Errorf("bundle of %s is left: %v", id, err)
	}
	if left, _ := filepath.Glob(filepath.Join(s.state, "fifo", id+"-*")); len(left) > 0 {
		s.t.Errorf("FIFOs of %s are left: %v", id, left)
	}
	if slices.Contains(testkit.RuncContainers(s.t, "default"), id) {
		s.t.Errorf("runc still knows %s", id)
	}
}

// expectNoBundles fails the test if the namespace holds any bundle.
func (s *shimctl) expectNoBundles() {
	s.t.Helper()
	if left, _ := os.ReadDir(s.namespaced); len(left) > 0 {
		s.t.Errorf("the namespace still holds %v", left)
	}
}

// status polls task state until it shows want, and returns the line.
func (s *shimctl) status(id, want string) string {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := s.run("task", "state", id)
		if r.Code == 0 && strings.HasPrefix(r.Stdout, id+" "+want+" ") {
			return r.Stdout
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("task %s never became %s; last: %q %q", id, want, r.Stdout, r.Stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// expectTrapped waits until the container's shell, pid, has set its trap for sig. The shell is
// PID 1 of the container and gets no signal it does not catch, and Start returns once runc has
// let the init go, which may be before the shell has even run: a signal sent before the trap is
// lost, or ends runc's init with a status of its own.
func expectTrapped(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("the shell %d never trapped signal %d", pid, sig), func() bool {
		return testkit.ShellTraps(pid, sig)
	})
}

// background starts shimctl with args and stops it with SIGKILL when the test ends, if it is
// still running. Its stdout and stderr are collected.
type background struct {
	cmd            *exec.Cmd
	stdout, stderr testkit.Buffer
	done           chan struct{} // closed when cmd has been waited for
	err            error         // of Wait; read after done
}

func (s *shimctl) background(args ...string) *background {
	s.t.Helper()
	b := &background{cmd: s.command(args...), done: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() {
		// Owned by the test: ends when the process does; the cleanup below makes sure it does.
		b.err = b.cmd.Wait()
		close(b.done)
	}()
	s.t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// stop sends sig to the process and returns its exit code once it has ended.
func (b *background) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not end after %v; stderr %q", b.cmd.Args, sig, b.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(b.err, &ee) {
		return ee.ExitCode()
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return 0
}

// expectError fails the test unless shimctl, called as what, exited with code and said why in
// a single "shimctl: " line on stderr containing want.
func expectError(t *testing.T, what string, r testkit.Result, code int, want string) {
	t.Helper()
	if r.Code != code {
		t.Errorf("%s: exit %d, want %d", what, r.Code, code)
	}
	if strings.Count(r.Stderr, "\n") != 1 || !strings.HasPrefix(r.Stderr, "shimctl: ") || !strings.Contains(r.Stderr, want) {
		t.Errorf("%s: stderr %q, want one line with %q", what, r.Stderr, want)
	}
}

// refusal is a call of shimctl that must fail: with exit code code and a line holding want.
type refusal struct {
	args []string
	code int
	want string
}

// expectRefused makes each call through run and checks how it fails.
func expectRefused(t *testing.T, run func(args ...string) testkit.Result, calls []refusal) {
	t.Helper()
	for _, c := range calls {
		expectError(t, "shimctl "+strings.Join(c.args, " "), run(c.args...), c.code, c.want)
	}
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

func TestRunRmFallsBackWithoutWait(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step04)
	s.track("rm")
	// No --rootfs: the busybox rootfs of the state directory is built on the way.
	r := s.run("run", "--rm", "rm", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.Code != 3 {
		t.Errorf("run: exit code %d, want the container's 3; stderr %q", r.Code, r.Stderr)
	}
	if r.Stdout != "out\n" {
		t.Errorf("stdout %q, want the container's \"out\\n\"", r.Stdout)
	}
	for _, want := range []string{"err\n", noWaitNote + "\n", "note: building a busybox rootfs"} {
		if strings.Count(r.Stderr, want) != 1 {
			t.Errorf("stderr %q, want %q once", r.Stderr, want)
		}
	}
	s.expectNoTask("rm")
	s.expectNoBundles()
}

func TestDetachedTaskOnStep04(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step04)
	s.track("det")
	r := s.run("run", "-d", "--rootfs", testkit.Rootfs(t), "det", "--", "sleep", "100")
	pid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if r.Code != 0 || err != nil {
		t.Fatalf("run -d: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	shimPid := testkit.ReadPid(t, filepath.Join(s.namespaced, "det", bundle.ShimPidFile))
	if line := s.status("det", "RUNNING"); !strings.Contains(line, fmt.Sprintf(" pid %d ", pid)) {
		t.Errorf("task state: %q, want pid %d", line, pid)
	}

	// Step 04 is a subreaper: the container's init is the shim's child.
	r = s.run("tree", "det")
	found := false
	for _, l := range strings.Split(r.Stdout, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == strconv.Itoa(pid) {
			found = f[1] == strconv.Itoa(shimPid)
		}
	}
	if r.Code != 0 || !found {
		t.Errorf("tree: container %d is not shown under the shim %d:\n%s%s", pid, shimPid, r.Stdout, r.Stderr)
	}

	if r := s.run("task", "kill", "-s", "KILL", "det"); r.Code != 0 {
		t.Fatalf("task kill: exit %d: %s", r.Code, r.Stderr)
	}
	expectError(t, "task wait on step 04", s.run("task", "wait", "det"), 1, "step 04 does not implement Wait yet; it arrives in step 05")
	s.status("det", "STOPPED")
	r = s.run("task", "delete", "det")
	if r.Code != 0 || !strings.Contains(r.Stdout, fmt.Sprintf("pid %d, exit status 137", pid)) {
		t.Errorf("task delete: exit %d, stdout %q, stderr %q; want pid %d, exit status 137", r.Code, r.Stdout, r.Stderr, pid)
	}
	s.expectNoTask("det", shimPid, pid)
}

func TestCreateStartDelete(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step04)
	rootfs := testkit.Rootfs(t)

	t.Run("started", func(t *testing.T) {
		s := s.in(t)
		s.track("ct")
		// sh is PID 1 of the container: only a trapped TERM reaches it.
		r := s.run("task", "create", "--rootfs", rootfs, "ct", "--", "sh", "-c", `trap "exit 4" TERM; while :; do sleep 0.1; done`)
		pid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
		if r.Code != 0 || err != nil {
			t.Fatalf("task create: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		s.status("ct", "CREATED")
		if r := s.run("task", "start", "ct"); r.Code != 0 || strings.TrimSpace(r.Stdout) != strconv.Itoa(pid) {
			t.Fatalf("task start: exit %d, stdout %q (want %d), stderr %q", r.Code, r.Stdout, pid, r.Stderr)
		}
		s.status("ct", "RUNNING")
		expectTrapped(t, pid, syscall.SIGTERM)
		if r := s.run("task", "kill", "-s", "sigterm", "ct"); r.Code != 0 {
			t.Fatalf("task kill -s sigterm: exit %d: %s", r.Code, r.Stderr)
		}
		if line := s.status("ct", "STOPPED"); !strings.Contains(line, " exit 4 ") {
			t.Errorf("task state: %q, want exit 4", line)
		}
		if r := s.run("task", "delete", "ct"); r.Code != 0 || !strings.Contains(r.Stdout, "exit status 4") {
			t.Errorf("task delete: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		s.expectNoTask("ct")
	})

	t.Run("never started", func(t *testing.T) {
		s := s.in(t)
		s.track("never")
		r := s.run("task", "create", "--rootfs", rootfs, "never", "--", "sleep", "100")
		pid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
		if r.Code != 0 || err != nil {
			t.Fatalf("task create: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
		}
		shimPid := testkit.ReadPid(t, filepath.Join(s.namespaced, "never", bundle.ShimPidFile))
		if r := s.run("task", "delete", "never"); r.Code != 0 {
			t.Errorf("task delete of a created task: exit %d, stderr %q", r.Code, r.Stderr)
		}
		s.expectNoTask("never", pid, shimPid)
	})
}

func TestUsageAndUnknownTasks(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step04)
	expectRefused(t, s.run, []refusal{
		{[]string{"task", "create", "x", "sleep", "1"}, 2, "after --"},
		{[]string{"task", "create", "x", "--"}, 2, "no command after --"},
		{[]string{"task", "create", "../x", "--", "true"}, 2, `id "../x"`},
		{[]string{"run", "../x", "--", "true"}, 2, `id "../x"`},
		{[]string{"run", "-d", "--rm", "x", "--", "true"}, 2, "-d and --rm"},
		{[]string{"task", "kill", "-s", "BOGUS", "x"}, 2, `unknown signal "BOGUS"`},
		{[]string{"task", "bogus"}, 2, `unknown command "bogus"`},
		{[]string{"task", "state", "a", "b"}, 2, "takes one task id"},
		{[]string{"task", "state", "nosuch"}, 1, `no task "nosuch"`},
		{[]string{"task", "delete", "nosuch"}, 1, `no task "nosuch"`},
		{[]string{"task", "wait", "nosuch"}, 1, `no task "nosuch"`},
	})
	s.expectNoBundles()
}

func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step04)
	s.expectTERMForwarded(t, "sig")
}

// expectTERMForwarded runs task id (with run's flags) as a shell that exits 7 on SIGTERM,
// sends shimctl SIGTERM once the shell said it is ready, and checks that the shell got it, that
// run exited with its status, and that --rm removed the task.
func (s *shimctl) expectTERMForwarded(t *testing.T, id string, flags ...string) {
	t.Helper()
	s.track(id)
	args := append(append([]string{"run", "--rm"}, flags...), "--rootfs", testkit.Rootfs(t), id, "--",
		"sh", "-c", `trap "echo got TERM; exit 7" TERM; echo ready; while :; do sleep 0.1; done`)
	b := s.background(args...)
	testkit.Eventually(t, 20*time.Second, "the container never said ready", func() bool {
		return strings.Contains(b.stdout.String(), "ready\n")
	})
	if code := b.stop(t, syscall.SIGTERM); code != 7 {
		t.Errorf("run: exit %d, want the container's 7; stderr %q", code, b.stderr.String())
	}
	if !strings.Contains(b.stdout.String(), "got TERM\n") {
		t.Errorf("stdout %q: the container did not get SIGTERM", b.stdout.String())
	}
	s.expectNoTask(id)
}

// TestEventsPrintsForwardedEvents plays a shim towards `shimctl events --json`: it forwards an
// event the way a step 05 shim does.
func TestEventsPrintsForwardedEvents(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step04)
	b := s.background("events", "--json")
	sock := filepath.Join(s.state, "events.sock")
	testkit.Eventually(t, 10*time.Second, "events never listened at "+sock, func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
	expectError(t, "a second events", s.run("events"), 1, "serves "+sock+" already")

	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	client := ttrpc.NewClient(conn)
	defer client.Close()
	event, err := typeurl.MarshalAnyToProto(&eventstypes.TaskExit{ContainerID: "fake", ID: "fake", Pid: 42, ExitStatus: 9})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	env := &types.Envelope{Timestamp: timestamppb.Now(), Namespace: "default", Topic: "/tasks/exit", Event: event}
	if _, err := eventsapi.NewTTRPCEventsClient(client).Forward(ctx, &eventsapi.ForwardRequest{Envelope: env}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the event was not printed", func() bool {
		return strings.Count(b.stdout.String(), "\n") == 1
	})
	var got struct {
		Namespace, Topic, Type string
		Event                  struct {
			ContainerID string `json:"container_id"`
			Pid         int
			ExitStatus  int `json:"exit_status"`
		}
	}
	if err := json.Unmarshal([]byte(b.stdout.String()), &got); err != nil {
		t.Fatalf("events --json printed %q: %v", b.stdout.String(), err)
	}
	if got.Namespace != "default" || got.Topic != "/tasks/exit" || got.Type != "containerd.events.TaskExit" ||
		got.Event.ContainerID != "fake" || got.Event.Pid != 42 || got.Event.ExitStatus != 9 {
		t.Errorf("events --json printed %q", b.stdout.String())
	}
	if code := b.stop(t, syscall.SIGINT); code != 0 {
		t.Errorf("events after SIGINT: exit %d, want 0; stderr %q", code, b.stderr.String())
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("events left its socket: %v", err)
	}
}

func TestRunWaitsAndEventsFollowOnStep05(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step05)
	rootfs := testkit.Rootfs(t)
	ev := s.background("events")
	testkit.Eventually(t, 10*time.Second, "events never listened", func() bool {
		return strings.Contains(ev.stderr.String(), "serving events at")
	})

	s.track("ev")
	r := s.run("run", "--rm", "--rootfs", rootfs, "ev", "--", "sh", "-c", "echo hi; exit 2")
	if r.Code != 2 || r.Stdout != "hi\n" {
		t.Errorf("run: exit %d, stdout %q; want 2 and \"hi\\n\"; stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if strings.Contains(r.Stderr, "note:") {
		t.Errorf("run against a shim with Wait fell back: stderr %q", r.Stderr)
	}
	s.expectNoTask("ev")

	topics := []string{"/tasks/create", "/tasks/start", "/tasks/exit", "/tasks/delete"}
	var lines []string
	testkit.Eventually(t, 10*time.Second, "not every event of ev arrived", func() bool {
		lines = nil
		for _, l := range strings.Split(ev.stdout.String(), "\n") {
			if strings.Contains(l, " container=ev ") {
				lines = append(lines, l)
			}
		}
		return len(lines) >= len(topics)
	})
	for i, topic := range topics {
		if f := strings.Fields(lines[i]); len(f) < 3 || f[1] != "default" || f[2] != topic {
			t.Errorf("event %d is %q, want %s in namespace default", i, lines[i], topic)
		}
	}
	if !strings.Contains(lines[2], " exit_status=2 ") {
		t.Errorf("exit event %q, want exit_status=2", lines[2])
	}

	// task wait on a shim that has Wait: it returns the status, and exits with it.
	s.track("w")
	if r := s.run("run", "-d", "--rootfs", rootfs, "w", "--", "sh", "-c", "exit 6"); r.Code != 0 {
		t.Fatalf("run -d: exit %d: %s", r.Code, r.Stderr)
	}
	r = s.run("task", "wait", "w")
	if r.Code != 6 || !strings.HasPrefix(r.Stdout, "exit status 6 at ") {
		t.Errorf("task wait: exit %d, stdout %q, stderr %q; want 6", r.Code, r.Stdout, r.Stderr)
	}
	if r := s.run("task", "delete", "w"); r.Code != 0 || !strings.Contains(r.Stdout, "exit status 6") {
		t.Errorf("task delete: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}

	if code := ev.stop(t, syscall.SIGINT); code != 0 {
		t.Errorf("events after SIGINT: exit %d; stderr %q", code, ev.stderr.String())
	}
}

// events starts `shimctl events` in the background and returns once it serves.
func (s *shimctl) events() *background {
	s.t.Helper()
	b := s.background("events")
	testkit.Eventually(s.t, 10*time.Second, "events never listened", func() bool {
		return strings.Contains(b.stderr.String(), "serving events at")
	})
	return b
}

// drivers lists the shimctl processes of this state directory that are running: everything
// that plays containerd towards its shims.
func (s *shimctl) drivers() []int {
	return driver.ProcessesWhere(func(args []string) bool {
		return args[0] == s.bin && driver.FlagValue(args, "state") == s.state
	})
}

// ls runs shimctl ls, which must succeed, and returns its rows by task id, each as the line's
// fields after the id joined by single spaces ("123 456 RUNNING -").
func (s *shimctl) ls() map[string]string {
	s.t.Helper()
	r := s.run("ls")
	if r.Code != 0 || r.Stderr != "" {
		s.t.Fatalf("ls: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	return lsRows(s.t, r.Stdout)
}

// lsRows parses the table ls prints.
func lsRows(t *testing.T, stdout string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if strings.Join(strings.Fields(lines[0]), " ") != "ID SHIM PID TASK PID STATUS EXIT" {
		t.Fatalf("ls printed no header: %q", stdout)
	}
	rows := map[string]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) < 5 {
			t.Fatalf("ls row %q is short", l)
		}
		rows[f[0]] = strings.Join(f[1:], " ")
	}
	return rows
}

// eventLines are the lines of an events output about container id.
func eventLines(out, id string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " container="+id+" ") {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestDriverRestartOnStep06 plays a containerd that dies and comes back: every driver process
// is killed while a container runs, the container exits while none runs, and a new driver
// finds the task, its exit, and the TaskExit event the shim kept for it. A shim killed after its
// container exited is cleaned up by ls with the exit from exit.json.
func TestDriverRestartOnStep06(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step06)
	rootfs := testkit.Rootfs(t)
	ev := s.events()

	s.track("alive")
	// sh is PID 1 of the container: only a trapped TERM reaches it, and the exit status it
	// then has is its own, not one a cleanup could make up (137).
	r := s.run("run", "-d", "--rootfs", rootfs, "alive", "--", "sh", "-c", `trap "exit 5" TERM; while :; do sleep 0.1; done`)
	pid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if r.Code != 0 || err != nil {
		t.Fatalf("run -d: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	dir := filepath.Join(s.namespaced, "alive")
	shimPid := testkit.ReadPid(t, filepath.Join(dir, bundle.ShimPidFile))
	// The first driver takes the create and start events, so that the exit alone is queued.
	testkit.Eventually(t, 10*time.Second, "the first events never got /tasks/start", func() bool {
		return strings.Contains(ev.stdout.String(), " /tasks/start container=alive ")
	})

	// Every driver dies at once, as containerd does when it crashes: run -d has returned,
	// events is the one left.
	drivers := s.drivers()
	if !slices.Equal(drivers, []int{ev.cmd.Process.Pid}) {
		t.Errorf("driver processes %v, want only events (%d)", drivers, ev.cmd.Process.Pid)
	}
	for _, p := range drivers {
		if p != ev.cmd.Process.Pid {
			_ = syscall.Kill(p, syscall.SIGKILL)
			testkit.ExpectGone(t, p, "driver")
		}
	}
	ev.stop(t, syscall.SIGKILL)
	if !driver.Alive(pid) {
		t.Fatal("the container died with the driver")
	}
	if p, err := driver.ReadProc(pid); err != nil || p.PPid != shimPid {
		t.Errorf("after the driver's death the container's parent is %d (%v), want the shim %d", p.PPid, err, shimPid)
	}
	if got, want := s.ls()["alive"], fmt.Sprintf("%d %d RUNNING -", shimPid, pid); got != want {
		t.Errorf("ls after the driver's death: alive is %q, want %q", got, want)
	}

	// The container exits while no driver runs: the shim must keep its exit, in the bundle and
	// in its queue of events.
	expectTrapped(t, pid, syscall.SIGTERM)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rec := testkit.WaitExitRecord(t, dir)
	if rec.Pid != pid || rec.ExitStatus != 5 || rec.ExitedAt.IsZero() {
		t.Fatalf("exit.json = %+v, want pid %d, status 5", rec, pid)
	}
	exitedAt := rec.ExitedAt.Local().Format(time.RFC3339Nano)

	ev2 := s.events()
	exitEvent := fmt.Sprintf(" default /tasks/exit container=alive id=alive pid=%d exit_status=5 exited_at=%s", pid, exitedAt)
	testkit.Eventually(t, 20*time.Second, "the queued exit never reached the new events", func() bool {
		return strings.Contains(ev2.stdout.String(), exitEvent)
	})
	r = s.run("task", "wait", "alive")
	if r.Code != 5 || r.Stdout != "exit status 5 at "+exitedAt+"\n" {
		t.Errorf("task wait: exit %d, stdout %q, stderr %q; want 5 at %s", r.Code, r.Stdout, r.Stderr, exitedAt)
	}
	if got, want := s.ls()["alive"], fmt.Sprintf("%d %d STOPPED 5 at %s", shimPid, pid, exitedAt); got != want {
		t.Errorf("ls after the exit: alive is %q, want %q", got, want)
	}
	if r := s.run("task", "delete", "alive"); r.Code != 0 || !strings.Contains(r.Stdout, "exit status 5") {
		t.Errorf("task delete: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	s.expectNoTask("alive", shimPid)
	// The shim forwards in order and waits for its last events before it exits: with the
	// delete in, every copy of the exit would be in too. The new driver gets the exit once,
	// and nothing the first one had taken already.
	lines := eventLines(ev2.stdout.String(), "alive")
	if len(lines) != 2 || !strings.Contains(lines[0], exitEvent) || !strings.Contains(lines[1], " /tasks/delete ") {
		t.Errorf("the new events got for alive:\n%s\nwant the exit, then the delete", strings.Join(lines, "\n"))
	}

	// A shim killed after its container exited: ls runs its delete action, which reports the
	// exit status the shim wrote in exit.json, and nothing of the task is left.
	s.track("dead")
	r = s.run("run", "-d", "--rootfs", rootfs, "dead", "--", "sh", "-c", "exit 7")
	deadPid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if r.Code != 0 || err != nil {
		t.Fatalf("run -d: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	deadBundle := filepath.Join(s.namespaced, "dead")
	rec = testkit.WaitExitRecord(t, deadBundle)
	if rec.Pid != deadPid || rec.ExitStatus != 7 {
		t.Fatalf("exit.json = %+v, want pid %d, status 7", rec, deadPid)
	}
	boot, err := driver.ReadBootstrap(deadBundle)
	if err != nil {
		t.Fatal(err)
	}
	deadShim := testkit.ReadPid(t, filepath.Join(deadBundle, bundle.ShimPidFile))
	if err := syscall.Kill(deadShim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.ExpectGone(t, deadShim, "killed shim")
	want := fmt.Sprintf("- %d DELETED 7 at %s", deadPid, rec.ExitedAt.Local().Format(time.RFC3339Nano))
	if got := s.ls()["dead"]; got != want {
		t.Errorf("ls after the shim's death: dead is %q, want %q", got, want)
	}
	s.expectNoTask("dead")
	// Other tests run containers beside this one's in the same runc root.
	for _, id := range []string{"alive", "dead"} {
		if slices.Contains(testkit.RuncContainers(t, "default"), id) {
			t.Errorf("runc still knows %s", id)
		}
	}
	if m := testkit.Mounts(t, s.state); len(m) > 0 {
		t.Errorf("mounts left under the state directory: %v", m)
	}
	if _, err := os.Lstat(boot.SocketPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead shim's socket %s is left: %v", boot.SocketPath(), err)
	}
	if left, _ := os.ReadDir(s.sockets); len(left) > 0 {
		t.Errorf("sockets left in %s: %v", s.sockets, left)
	}
	if rows := s.ls(); len(rows) > 0 {
		t.Errorf("a second ls still lists %v", rows)
	}
	if code := ev2.stop(t, syscall.SIGINT); code != 0 {
		t.Errorf("events after SIGINT: exit %d; stderr %q", code, ev2.stderr.String())
	}
}

// TestLsReportsWhatItCannotClean gives ls a bundle whose shim binary is gone: that bundle is
// one line on stderr and exit 1, and the other tasks are listed all the same.
func TestLsReportsWhatItCannotClean(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step06)
	// A shim without a task: started, never given a container.
	if r := s.run("shim", "start", "idle"); r.Code != 0 {
		t.Fatalf("shim start: exit %d, stderr %q", r.Code, r.Stderr)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(s.namespaced, "idle")); err == nil {
			s.run("shim", "shutdown", "idle")
			s.run("shim", "delete", "idle")
		}
	})
	shimPid := testkit.ReadPid(t, filepath.Join(s.namespaced, "idle", bundle.ShimPidFile))
	broken := filepath.Join(s.namespaced, "broken")
	if err := os.Mkdir(broken, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, bundle.ShimBinaryFile), []byte("/nonexistent/shim"), 0o600); err != nil {
		t.Fatal(err)
	}

	r := s.run("ls")
	expectError(t, "ls", r, 1, "broken: shim is gone, and its delete failed")
	rows := lsRows(t, r.Stdout)
	if want := fmt.Sprintf("%d - NO TASK -", shimPid); len(rows) != 1 || rows["idle"] != want {
		t.Errorf("ls rows %q, want idle as %q", rows, want)
	}
	if _, err := os.Stat(broken); err != nil {
		t.Errorf("ls removed a bundle it could not clean up: %v", err)
	}

	// As containerd takes a shim down: Shutdown, then the delete action.
	if r := s.run("shim", "shutdown", "idle"); r.Code != 0 {
		t.Errorf("shim shutdown: exit %d, stderr %q", r.Code, r.Stderr)
	}
	testkit.ExpectGone(t, shimPid, "shim of idle")
	if r := s.run("shim", "delete", "idle"); r.Code != 0 {
		t.Errorf("shim delete: exit %d, stderr %q", r.Code, r.Stderr)
	}
}
