// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/console"
	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// TestRunTerminal runs shimctl on a real pseudo-terminal, as a user's shell would: its
// controlling terminal is the pty's slave, and the test types on the master.
func TestRunTerminal(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	s.track("tty")
	p := s.onPty("run", "-t", "--rm", "--rootfs", testkit.Rootfs(t), "tty", "--", "sh")
	p.shell()
	s.expectNoTask("tty")
}

// TestExecTerminal is TestRunTerminal for a shell exec'd into a running task.
func TestExecTerminal(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	s.detached("xtty", "sleep", "1000")
	p := s.onPty("task", "exec", "-t", "--exec-id", "sh", "xtty", "--", "sh")
	p.shell()
	// exec deletes the exec from the shim once it has ended.
	expectError(t, "kill of the ended exec", s.run("task", "kill", "--exec-id", "sh", "xtty"), 1, "exec sh in task xtty: not found")
}

// TestTerminalRestoredOnFailure: a run -t that fails, or ends by a signal forwarded and a kill
// from elsewhere, leaves the terminal as it found it.
func TestTerminalRestoredOnFailure(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, finalShim)
	rootfs := testkit.Rootfs(t)

	t.Run("create fails", func(t *testing.T) {
		s := s.in(t)
		s.track("ttyfail")
		p := s.onPty("run", "-t", "--rm", "--runtime-binary", "/nonexistent/runtime", "--rootfs", rootfs, "ttyfail", "--", "sh")
		p.expectExit(1)
		p.expectRestored()
		s.expectNoTask("ttyfail")
	})

	t.Run("killed", func(t *testing.T) {
		s := s.in(t)
		s.track("ttykill")
		p := s.onPty("run", "-t", "--rm", "--rootfs", rootfs, "ttykill", "--", "sh")
		// The shell prompts while Start's reply may still be on its way, and stdin is copied
		// only once Start returned: the answer shows shimctl forwards from here on.
		p.typeUntil("echo $((40+2))\r", "42")
		// Forwarded to the shell, PID 1 of its container, which ignores it.
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if r := s.run("task", "kill", "-s", "KILL", "ttykill"); r.Code != 0 {
			t.Fatalf("task kill: exit %d: %s", r.Code, r.Stderr)
		}
		p.expectExit(137)
		p.expectRestored()
		s.expectNoTask("ttykill")
	})
}

// pty is shimctl running with a pseudo-terminal's slave as its controlling terminal.
type pty struct {
	t      *testing.T
	master console.Console
	slave  *os.File
	screen testkit.Buffer // everything shimctl showed on the terminal
	before *unix.Termios  // the slave's settings before shimctl started
	done   chan error     // of shimctl's Wait
	cmd    *exec.Cmd
}

func (s *shimctl) onPty(args ...string) *pty {
	t := s.t
	t.Helper()
	master, slaveName, err := console.NewPty()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	slave, err := os.OpenFile(slaveName, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	if err := master.Resize(console.WinSize{Height: 30, Width: 100}); err != nil {
		t.Fatal(err)
	}
	p := &pty{t: t, master: master, slave: slave, done: make(chan error, 1), cmd: s.command(args...)}
	if p.before, err = unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS); err != nil {
		t.Fatal(err)
	}
	go func() {
		// Owned by the test: ends when master is closed, in the cleanup above.
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			p.screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	cmd := p.cmd
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		p.done <- <-p.done
	})
	return p
}

// shell checks a shell on the terminal: its prompt, the terminal's size and a change of it,
// Ctrl-D ending it and shimctl with exit 0, and the terminal restored.
func (p *pty) shell() {
	t := p.t
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "no shell prompt", func() bool {
		return strings.Contains(p.screen.String(), "# ")
	})
	// The size the pty had when shimctl started reaches the container after Start.
	p.typeUntil("stty size\r", "30 100")
	if err := p.master.Resize(console.WinSize{Height: 40, Width: 120}); err != nil {
		t.Fatal(err)
	}
	p.typeUntil("stty size\r", "40 120")

	if _, err := p.master.Write([]byte("\x04")); err != nil {
		t.Fatal(err)
	}
	p.expectExit(0)
	p.expectRestored()
}

// expectExit waits for shimctl to end and checks its exit code.
func (p *pty) expectExit(want int) {
	t := p.t
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Errorf("shimctl: exit %d, want %d; screen %q", code, want, p.screen.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("shimctl did not end; screen %q", p.screen.String())
	}
}

// expectRestored checks that the terminal's settings are those it had before shimctl.
func (p *pty) expectRestored() {
	t := p.t
	t.Helper()
	after, err := unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *p.before {
		t.Errorf("the terminal was not restored:\nbefore %+v\nafter  %+v", *p.before, *after)
	}
}

// typeUntil types line on the terminal until want appears on the screen after it.
func (p *pty) typeUntil(line, want string) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mark := len(p.screen.String())
		if _, err := p.master.Write([]byte(line)); err != nil {
			p.t.Fatal(err)
		}
		end := time.Now().Add(time.Second)
		for time.Now().Before(end) {
			if strings.Contains(p.screen.String()[mark:], want) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("typed %q, never saw %q; screen %q", line, want, p.screen.String())
		}
	}
}
