// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
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
	master, slaveName, err := console.NewPty()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	slave, err := os.OpenFile(slaveName, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	if err := master.Resize(console.WinSize{Height: 30, Width: 100}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}

	var screen testkit.Buffer
	go func() {
		// Owned by the test: ends when master is closed, deferred above.
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	cmd := s.command("run", "-t", "--rm", "--rootfs", testkit.Rootfs(t), "tty", "--", "sh")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})

	testkit.Eventually(t, 20*time.Second, "no shell prompt", func() bool {
		return strings.Contains(screen.String(), "# ")
	})
	// The size the pty had when shimctl started reaches the container after Start.
	typeUntil(t, master, &screen, "stty size\r", "30 100")
	if err := master.Resize(console.WinSize{Height: 40, Width: 120}); err != nil {
		t.Fatal(err)
	}
	typeUntil(t, master, &screen, "stty size\r", "40 120")

	if _, err := master.Write([]byte("\x04")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("run -t after Ctrl-D: %v, want exit 0; screen %q", err, screen.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("run -t did not end after Ctrl-D; screen %q", screen.String())
	}
	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Errorf("the terminal was not restored:\nbefore %+v\nafter  %+v", *before, *after)
	}
	s.expectNoTask("tty")
}

// typeUntil types line on the terminal until want appears on the screen after it.
func typeUntil(t *testing.T, master console.Console, screen *testkit.Buffer, line, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mark := len(screen.String())
		if _, err := master.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(time.Second)
		for time.Now().Before(end) {
			if strings.Contains(screen.String()[mark:], want) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatalf("typed %q, never saw %q; screen %q", line, want, screen.String())
		}
	}
}
