// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// ttyExec starts an exec with a terminal whose output goes to a FIFO the test reads, as
// `ctr task exec -t` does. done is closed at the output's EOF: the shim closed its end.
func ttyExec(t *testing.T, k *testkit.Task, execID string, args ...string) (out *testkit.Buffer, done <-chan struct{}) {
	t.Helper()
	data, err := json.Marshal(specs.Process{
		Terminal: true, Args: args, Cwd: "/",
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"},
	})
	if err != nil {
		t.Fatal(err)
	}
	fifos, err := k.D.NewFIFOs(k.ID+"-"+execID, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fifos.Remove() })
	fifos.Stderr = "" // a terminal has one output stream
	out = &testkit.Buffer{}
	a, err := fifos.Attach(context.Background(), nil, out, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ended := make(chan struct{})
	go func() {
		// Owned by the test: ends at EOF, or when the cleanup above closes the FIFOs.
		a.Wait()
		close(ended)
	}()
	_, err = k.Conn.Task.Exec(rpcCtx(t, 10*time.Second), &taskapi.ExecProcessRequest{
		ID: k.ID, ExecID: execID, Terminal: true, Stdout: fifos.Stdout,
		Spec: &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process", Value: data},
	})
	if err != nil {
		t.Fatalf("Exec %s: %v", execID, err)
	}
	if _, err := k.Conn.Task.Start(rpcCtx(t, 10*time.Second), &taskapi.StartRequest{ID: k.ID, ExecID: execID}); err != nil {
		t.Fatalf("Start %s: %v", execID, err)
	}
	return out, ended
}

// ptyMasters lists the shim's descriptors that are pseudo-terminal masters.
func ptyMasters(t *testing.T, pid int) []int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since the listing
		}
		if target == "/dev/ptmx" || target == "/dev/pts/ptmx" {
			fd, _ := strconv.Atoi(e.Name())
			fds = append(fds, fd)
		}
	}
	return fds
}

// threadsReading lists the shim's threads that wait in read(2) on one of fds.
func threadsReading(t *testing.T, pid int, fds []int) []string {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, tid := range tasks {
		// "NR arg0 ...": the number of the call the thread is blocked in, and its arguments.
		sc, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, tid.Name()))
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(sc))
		if len(f) < 2 || f[0] != strconv.Itoa(unix.SYS_READ) {
			continue
		}
		fd, err := strconv.ParseInt(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err != nil {
			continue
		}
		for _, m := range fds {
			if int(fd) == m {
				found = append(found, tid.Name())
			}
		}
	}
	return found
}

// TestTerminalHoldsNoThread: a terminal's output is copied through epoll. A copy that blocks in
// read(2) on the pty master holds an OS thread for as long as the terminal lives, one per
// `exec -it` session.
func TestTerminalHoldsNoThread(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "tty-threads", testkit.TaskOptions{Args: []string{"sleep", "600"}, NullIO: true})
	k.Run()
	out, _ := ttyExec(t, k, "sh", "/bin/sh", "-c", "echo tty-ready; exec sleep 600")
	testkit.Eventually(t, 10*time.Second, "the terminal's output never arrived", func() bool {
		return strings.Contains(out.String(), "tty-ready")
	})
	masters := ptyMasters(t, k.ShimPid)
	if len(masters) != 1 {
		t.Fatalf("the shim holds pty masters %v, want one", masters)
	}
	// The copy has read the output and is waiting for more: a blocking copy is in read(2) now.
	if tids := threadsReading(t, k.ShimPid, masters); len(tids) > 0 {
		t.Errorf("shim threads %v wait in read(2) on the pty master", tids)
	}
}

// TestTerminalClosedAtExit: an `exec -t` that leaves a child behind holding its terminal still
// ends, for the shim, when it exits, as with containerd's shim (ShutdownConsole at exit): what
// it wrote is delivered, its output FIFO closed, and Delete releases the pty master. Waiting
// for the terminal to be let go instead would wait for the child.
func TestTerminalClosedAtExit(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "tty-exit", testkit.TaskOptions{Args: []string{"sleep", "600"}, NullIO: true})
	k.Run()
	// The child ignores the SIGHUP the kernel sends when the session leader exits, as a
	// daemon started from a shell does, and keeps the terminal open. The shell ignores it
	// before the fork, so that the child cannot be hung up before it is set.
	out, eof := ttyExec(t, k, "sh", "/bin/sh", "-c", `echo tty-bye; trap "" HUP; sleep 600 & exit 0`)
	if w := waitExec(t, k, "sh"); w.ExitStatus != 0 {
		t.Fatalf("exec exited %d", w.ExitStatus)
	}
	select {
	case <-eof:
	case <-time.After(10 * time.Second):
		t.Fatalf("the exec's output FIFO was not closed after its exit; it showed %q", out.String())
	}
	if !strings.Contains(out.String(), "tty-bye") {
		t.Errorf("the terminal showed %q, want what the exec wrote before it exited", out.String())
	}
	if _, err := k.Conn.Task.Delete(rpcCtx(t, 20*time.Second), &taskapi.DeleteRequest{ID: k.ID, ExecID: "sh"}); err != nil {
		t.Fatalf("Delete exec: %v", err)
	}
	if masters := ptyMasters(t, k.ShimPid); len(masters) > 0 {
		t.Errorf("after Delete the shim still holds pty masters %v (threads reading them: %v)", masters, threadsReading(t, k.ShimPid, masters))
	}
}

// TestResizeWithoutTerminal: ResizePty of a process that has no terminal, the init or an exec,
// succeeds and does nothing, as containerd's shim answers; clients such as ctr send it for
// whatever they attach to.
func TestResizeWithoutTerminal(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "resize-notty", testkit.TaskOptions{Args: []string{"sleep", "600"}})
	k.Run()
	if _, err := k.Conn.Task.Exec(rpcCtx(t, 10*time.Second), &taskapi.ExecProcessRequest{
		ID: k.ID, ExecID: "e", Spec: execSpec(t, "sleep", "600"),
	}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	for _, execID := range []string{"", "e"} {
		if _, err := k.Conn.Task.ResizePty(rpcCtx(t, 10*time.Second), &taskapi.ResizePtyRequest{ID: k.ID, ExecID: execID, Width: 80, Height: 24}); err != nil {
			t.Errorf("ResizePty of %q, created: %v", execID, err)
		}
	}
	if _, err := k.Conn.Task.Start(rpcCtx(t, 10*time.Second), &taskapi.StartRequest{ID: k.ID, ExecID: "e"}); err != nil {
		t.Fatalf("Start exec: %v", err)
	}
	for _, execID := range []string{"", "e"} {
		if _, err := k.Conn.Task.ResizePty(rpcCtx(t, 10*time.Second), &taskapi.ResizePtyRequest{ID: k.ID, ExecID: execID, Width: 100, Height: 40}); err != nil {
			t.Errorf("ResizePty of %q, running: %v", execID, err)
		}
	}
}

// TestTerminalToLogger: `exec -t` with a binary:// log URI, as containerd's shim takes it
// (CopyConsole): the terminal's output goes to the logging binary's stdout, and the logger is
// stopped when the exec is deleted.
func TestTerminalToLogger(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "tty-logger", testkit.TaskOptions{Args: []string{"sleep", "600"}, NullIO: true})
	k.Run()
	uri, to := shellLogger(t)
	data, err := json.Marshal(specs.Process{Terminal: true, Args: []string{"/bin/sh", "-c", "echo tty-to-logger"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Conn.Task.Exec(rpcCtx(t, 10*time.Second), &taskapi.ExecProcessRequest{
		ID: k.ID, ExecID: "sh", Terminal: true, Stdout: uri, Stderr: uri,
		Spec: &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process", Value: data},
	}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if _, err := k.Conn.Task.Start(rpcCtx(t, 10*time.Second), &taskapi.StartRequest{ID: k.ID, ExecID: "sh"}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitExec(t, k, "sh")
	if _, err := k.Conn.Task.Delete(rpcCtx(t, 20*time.Second), &taskapi.DeleteRequest{ID: k.ID, ExecID: "sh"}); err != nil {
		t.Fatalf("Delete exec: %v", err)
	}
	// The logger has exited (Delete waited for it); cat, which it became, wrote as it read.
	if out, err := os.ReadFile(to + ".out"); err != nil || string(out) != "tty-to-logger\r\n" {
		t.Errorf("the logging binary got %q (%v), want the terminal's output", out, err)
	}
	checkLoggerEnv(t, to, "sh", d.Namespace)
}

// TestResizeExitedExec: ResizePty of an exec that has exited fails, with or without a
// terminal, as containerd's shim answers it; FailedPrecondition, where containerd's error has
// no class (Unknown), which this shim keeps for runc's failures.
func TestResizeExitedExec(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "resize-exited", testkit.TaskOptions{Args: []string{"sleep", "600"}, NullIO: true})
	k.Run()
	ttyExec(t, k, "tty", "/bin/true")
	if _, err := k.Conn.Task.Exec(rpcCtx(t, 10*time.Second), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "pipes", Spec: execSpec(t, "/bin/true")}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if _, err := k.Conn.Task.Start(rpcCtx(t, 10*time.Second), &taskapi.StartRequest{ID: k.ID, ExecID: "pipes"}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	for _, execID := range []string{"tty", "pipes"} {
		waitExec(t, k, execID)
		_, err := k.Conn.Task.ResizePty(rpcCtx(t, 10*time.Second), &taskapi.ResizePtyRequest{ID: k.ID, ExecID: execID, Width: 80, Height: 24})
		expectCode(t, "ResizePty of exited exec "+execID, err, codes.FailedPrecondition)
	}
}

// TestTerminalClosedAtEndOfInput: CloseIO on a process with a terminal, once its client has
// closed the stdin FIFO, closes the terminal, as containerd's shim does: the shell waiting for
// its next line is hung up and exits, where it would otherwise wait for a ^D nobody sends (a
// kubectl exec -it whose client went away).
func TestTerminalClosedAtEndOfInput(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "tty-eoi", testkit.TaskOptions{Args: []string{"sleep", "600"}, NullIO: true})
	k.Run()
	data, err := json.Marshal(specs.Process{
		Terminal: true, Args: []string{"/bin/sh", "-c", `read line; echo "got $line"; read more; echo "never $more"`}, Cwd: "/",
	})
	if err != nil {
		t.Fatal(err)
	}
	fifos, err := k.D.NewFIFOs(k.ID+"-sh", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fifos.Remove() })
	fifos.Stderr = ""
	out := &testkit.Buffer{}
	a, err := fifos.Attach(context.Background(), strings.NewReader("hello\n"), out, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, err := k.Conn.Task.Exec(rpcCtx(t, 10*time.Second), &taskapi.ExecProcessRequest{
		ID: k.ID, ExecID: "sh", Terminal: true, Stdin: fifos.Stdin, Stdout: fifos.Stdout,
		Spec: &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process", Value: data},
	}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if _, err := k.Conn.Task.Start(rpcCtx(t, 10*time.Second), &taskapi.StartRequest{ID: k.ID, ExecID: "sh"}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "the shell never read its first line", func() bool {
		return strings.Contains(out.String(), "got hello")
	})
	if _, err := k.Conn.Task.CloseIO(rpcCtx(t, 10*time.Second), &taskapi.CloseIORequest{ID: k.ID, ExecID: "sh", Stdin: true}); err != nil {
		t.Fatalf("CloseIO: %v", err)
	}
	w, err := k.Conn.Task.Wait(rpcCtx(t, 20*time.Second), &taskapi.WaitRequest{ID: k.ID, ExecID: "sh"})
	if err != nil {
		t.Fatalf("the shell was not hung up at the end of its input: Wait: %v (the terminal showed %q)", err, out.String())
	}
	if strings.Contains(out.String(), "never") {
		t.Errorf("the shell read a line after the end of input: %q (exit %d)", out.String(), w.ExitStatus)
	}
}

// TestResizePtyReachesTheTerminal: ResizePty sets the size of the exec's terminal, and the
// kernel tells the process with SIGWINCH, as it does when a user resizes a window attached
// with `ctr task exec -t`. The shell waits for that signal, then prints the size it sees.
func TestResizePtyReachesTheTerminal(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "resize-tty", testkit.TaskOptions{Args: []string{"sleep", "600"}, NullIO: true})
	k.Run()
	// wait, unlike a foreground sleep, returns as soon as the trapped signal comes.
	out, _ := ttyExec(t, k, "tty", "/bin/sh", "-c",
		`trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 600 & wait $!; done`)
	testkit.Eventually(t, 10*time.Second, "the shell never said ready", func() bool {
		return strings.Contains(out.String(), "ready")
	})
	if _, err := k.Conn.Task.ResizePty(rpcCtx(t, 10*time.Second), &taskapi.ResizePtyRequest{ID: k.ID, ExecID: "tty", Width: 123, Height: 45}); err != nil {
		t.Fatalf("ResizePty: %v", err)
	}
	// Without a resize there is no SIGWINCH, and the shell does not exit.
	if w := waitExec(t, k, "tty"); w.ExitStatus != 0 {
		t.Errorf("the shell exited %d, want 0", w.ExitStatus)
	}
	testkit.Eventually(t, 10*time.Second, "the shell did not print the new size", func() bool {
		return strings.Contains(out.String(), "45 123")
	})
	// The init has no terminal: nothing to resize, and no error, as containerd's shim answers.
	if _, err := k.Conn.Task.ResizePty(rpcCtx(t, 10*time.Second), &taskapi.ResizePtyRequest{ID: k.ID, Width: 80, Height: 24}); err != nil {
		t.Errorf("ResizePty of the init without a terminal: %v", err)
	}
	// An exec that has exited has no terminal to resize any more.
	_, err := k.Conn.Task.ResizePty(rpcCtx(t, 10*time.Second), &taskapi.ResizePtyRequest{ID: k.ID, ExecID: "tty", Width: 80, Height: 24})
	expectCode(t, "ResizePty of the exited exec", err, codes.FailedPrecondition)
}
