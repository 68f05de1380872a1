// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/console"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// testTerminal runs `ctr run -t` on a real pseudo-terminal: the shell inside sees the
// terminal's size, then the new size after a resize, which travels as SIGWINCH to ctr and as
// ResizePty to the shim.
func (e *env) testTerminal(t *testing.T) {
	e = e.sub(t)
	id := e.container("tty")
	master, slavePath, err := console.NewPty()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if err := master.Resize(console.WinSize{Height: 24, Width: 80}); err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile(slavePath, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := e.c.CtrCommand(context.Background(), append(e.runArgs("--rm", "-t"), id, "/bin/sh")...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var waitErr error
	done := make(chan struct{}) // closed once ctr has been waited for
	go func() { waitErr = cmd.Wait(); close(done) }()
	var screen testkit.Buffer
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("the terminal showed:\n%s", screen.String())
		}
	})

	go func() {
		// Ends when the master is closed (deferred above) or ctr exits and the pty is hung up.
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	expect := func(what string) {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, "the terminal never showed "+what, func() bool {
			return strings.Contains(screen.String(), what)
		})
	}
	expect("# ") // the shell's prompt: it runs, on a terminal
	master.Write([]byte("stty size; echo size-printed\n"))
	expect("24 80")
	if err := master.Resize(console.WinSize{Height: 40, Width: 100}); err != nil {
		t.Fatal(err)
	}
	// ctr learns of the resize through SIGWINCH and forwards it; give the shell time to see it
	// by asking until the new size shows.
	testkit.Eventually(t, 20*time.Second, "the resize never reached the container", func() bool {
		master.Write([]byte("stty size\n"))
		time.Sleep(100 * time.Millisecond)
		return strings.Contains(screen.String(), "40 100")
	})
	master.Write([]byte("exit 6\n"))
	select {
	case <-done:
		var ee *exec.ExitError
		if !asExit(waitErr, &ee) || ee.ExitCode() != 6 {
			t.Errorf("ctr run -t exited with %v, want 6", waitErr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ctr run -t did not end after exit")
	}
	e.noShimLeft(id)
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}
