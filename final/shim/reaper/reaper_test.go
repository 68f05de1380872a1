// SPDX-License-Identifier: Apache-2.0

package reaper

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	runc "github.com/containerd/go-runc"
)

// guard bounds every wait for an exit, so that a lost exit fails the test instead of hanging
// it; nothing is asserted about how long the wait took.
const guard = time.Minute

// running is a reaper whose loop runs until the test ends, and a subscription to it. The tests
// of this package run one at a time: each loop reaps every child of the test process.
func running(t *testing.T) (*Reaper, *Queue) {
	t.Helper()
	r := New()
	q := r.Subscribe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		r.Unsubscribe(q)
	})
	return r, q
}

// waitExit takes exits from q until pid's, and returns it with those that came before it.
func waitExit(t *testing.T, q *Queue, pid int) (Exit, []Exit) {
	t.Helper()
	var before []Exit
	deadline := time.After(guard)
	for {
		for _, x := range q.Take() {
			if x.Pid == pid {
				return x, before
			}
			before = append(before, x)
		}
		select {
		case <-q.Ready():
		case <-deadline:
			t.Fatalf("the exit of pid %d never reached the subscriber; it got %v", pid, before)
		}
	}
}

// startUnrelated starts a child behind the reaper's back, as runc leaves a container behind.
func startUnrelated(t *testing.T, name string, args ...string) int {
	t.Helper()
	c := exec.Command(name, args...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	// The reap loop collects it; Wait would find nothing to wait for.
	_ = c.Process.Release()
	return pid
}

// A command started through the reaper (runc, as go-runc runs it, with Start or StartLocked)
// gets its own exit, 128 plus the signal for a killed one, and no subscriber takes it for a
// container's; any other child's exit goes to the subscribers.
func TestCommandExitGoesToItsCaller(t *testing.T) {
	for _, tc := range []struct {
		name   string
		start  func(*Reaper, *exec.Cmd) (chan runc.Exit, error)
		script string
		want   int
	}{
		{"Start", (*Reaper).Start, "exit 3", 3},
		{"StartLocked", (*Reaper).StartLocked, "kill -KILL $$", 128 + 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, q := running(t)
			cmd := exec.Command("sh", "-c", tc.script)
			ec, err := tc.start(r, cmd)
			if err != nil {
				t.Fatal(err)
			}
			cmdPid := cmd.Process.Pid // Wait releases the process, and its Pid with it
			status, err := r.Wait(cmd, ec)
			if err != nil || status != tc.want {
				t.Fatalf("Wait = %d, %v; want %d", status, err, tc.want)
			}
			// The command's exit, had it gone to subscribers too, was queued before this one.
			pid := startUnrelated(t, "sh", "-c", "exit 4")
			x, before := waitExit(t, q, pid)
			if x.Status != 4 {
				t.Fatalf("unrelated child's exit status %d, want 4", x.Status)
			}
			for _, b := range before {
				if b.Pid == cmdPid {
					t.Fatalf("the command's exit (pid %d) reached a subscriber", b.Pid)
				}
			}
		})
	}
}

// An orphan below the process, as a container's init is once runc has exited, is adopted and
// reaped, and its exit goes to the subscribers.
func TestOrphanExitGoesToSubscribers(t *testing.T) {
	// Process-wide, and harmless to the other tests here: they reap their children anyway.
	if err := SetSubreaper(); err != nil {
		t.Fatal(err)
	}
	r, q := running(t)
	// The orphan reads fd 3 until the test closes its other end: it outlives its parent.
	hold, release, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Close(); release.Close() })
	var out bytes.Buffer
	cmd := exec.Command("sh", "-c", "cat <&3 >/dev/null & echo $!")
	cmd.ExtraFiles = []*os.File{hold}
	cmd.Stdout = &out
	ec, err := r.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	hold.Close()
	if status, err := r.Wait(cmd, ec); err != nil || status != 0 {
		t.Fatalf("the orphan's parent: Wait = %d, %v", status, err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("orphan's pid %q: %v", out.String(), err)
	}
	release.Close()
	if x, _ := waitExit(t, q, orphan); x.Status != 0 {
		t.Fatalf("orphan's exit status %d, want 0", x.Status)
	}
}
