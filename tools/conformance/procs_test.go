// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// startDaemon starts a shell that puts a sleep whose command line is name in a session of its
// own, in the background, and exits, as containerd's shim start does; it returns the daemon's
// PID once its starter is gone. The daemon has no child that killing it would leave behind.
func startDaemon(t *testing.T, name string) int {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `setsid bash -c 'exec -a "$0" sleep 1000' "$1" </dev/null >/dev/null 2>&1 & echo $!`, "sh", name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestEndDescendantsSparesBystanders: a process that names the suite's paths but is not the
// tool's (a `tail -f` of the suite's log) survives cleanup, while a daemonized process of the
// tool's, re-parented to it as a subreaper, is killed and reaped, leaving no zombie.
func TestEndDescendantsSparesBystanders(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") == "true" {
		t.Fatal("requirement missing in CI: these tests run as root")
	}
	// Started before the tool becomes a subreaper, it re-parents to init (or whoever reaps for
	// the test binary), not to the tool.
	bystander := startDaemon(t, "tail -f "+suiteState+"/containerd.log")
	t.Cleanup(func() { _ = syscall.Kill(bystander, syscall.SIGKILL) })

	if err := becomeSubreaper(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	ours := startDaemon(t, "containerd-shim-runc-v2 -address "+suiteState+"/containerd.sock")
	if p, _ := driver.ReadProc(ours); p.PPid != os.Getpid() {
		t.Fatalf("the daemon %d has parent %d, want the subreaper %d", ours, p.PPid, os.Getpid())
	}

	ended := endDescendants()
	if _, err := driver.ReadProc(ours); err == nil {
		t.Errorf("the tool's daemon %d is still there (a zombie if its state is Z); ended %q", ours, ended)
	}
	if !driver.Alive(bystander) {
		t.Errorf("the bystander %d naming %s was killed", bystander, suiteState)
	}
}

func TestIsSuiteProcess(t *testing.T) {
	for _, c := range []struct {
		args string
		want bool
	}{
		{"containerd --root /var/lib/containerd-test --state /run/containerd-test --log-level debug --config /tmp/x", true},
		{"/opt/bin/containerd --state=/run/containerd-test", true},
		{"containerd-shim-runc-v2 -namespace testing -id abc -address /run/containerd-test/containerd.sock", true},
		{"containerd-shim-shimwalk-v2 -namespace testing -id abc -address /run/containerd-test/containerd.sock -debug", true},
		{"tail -f /run/containerd-test/containerd.log", false},
		{"containerd --root /var/lib/containerd-test-mine --state /run/containerd-test-mine", false},
		{"containerd-shim-runc-v2 -namespace testing -id abc -address /run/containerd/containerd.sock", false},
		{"go test ./integration/client -root /var/lib/containerd-test", false},
		{"", false},
	} {
		if got := isSuiteProcess(strings.Fields(c.args)); got != c.want {
			t.Errorf("isSuiteProcess(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// TestCleanupStale: before its first start the tool ends a killed earlier run's containerd on
// the suite's paths, which is not its descendant, and its directories, and nothing else that
// names those paths.
func TestCleanupStale(t *testing.T) {
	testkit.RequireRoot(t) // the suite's paths are root's
	// The suite's paths are shared: hold its lock as a run does.
	lock, err := os.OpenFile(suiteLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// sh -c 'read x' waits on its stdin with no child of its own and keeps the command line it
	// was given, so it can stand for a containerd and a bystander.
	start := func(args ...string) (*exec.Cmd, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := &exec.Cmd{Path: "/bin/sh", Args: args, Stdin: r}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		t.Cleanup(func() { _ = cmd.Process.Kill(); w.Close(); _ = cmd.Wait() })
		return cmd, w
	}
	stale, _ := start("containerd", "-c", "read x", "--root", suiteRoot, "--state", suiteState)
	bystander, _ := start("tail", "-c", "read x", "-f", suiteState+"/containerd.log")
	if err := os.MkdirAll(filepath.Join(suiteRoot, "leftover"), 0o700); err != nil {
		t.Fatal(err)
	}

	left := cleanupStale()
	if err := stale.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the stale containerd exited with %v, want killed; cleanup said %q", err, left)
	}
	if !driver.Alive(bystander.Process.Pid) {
		t.Errorf("the bystander naming %s was killed", suiteState)
	}
	if _, err := os.Stat(suiteRoot); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", suiteRoot, err)
	}
}
