// SPDX-License-Identifier: Apache-2.0

package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// calls records what a watcher notified, and answers as a shim would: settled once the count
// it reads has grown.
type calls struct {
	mu    sync.Mutex
	ids   []string
	count func(id string) uint64 // nil: always settled
	seen  map[string]uint64
}

func (c *calls) notify(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, id)
	if c.count == nil {
		return true
	}
	n := c.count(id)
	if n > c.seen[id] {
		c.seen[id] = n
		return true
	}
	return false
}

func (c *calls) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, x := range c.ids {
		if x == id {
			n++
		}
	}
	return n
}

// runWatcher starts w.Run and stops it, and checks that it stopped, when the test ends.
func runWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the watcher's Run did not end with its context")
		}
	})
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestWatcherV2OnFakeTree watches memory.events files of a fake cgroup2 tree: a change of one
// file is a notification for its container only; after Remove, none.
func TestWatcherV2OnFakeTree(t *testing.T) {
	t.Parallel()
	c := &calls{}
	w, err := NewWatcher(c.notify, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	a := fakeCgroup(t, true, "oom 0\noom_kill 0\n")
	b := fakeCgroup(t, true, "oom 0\noom_kill 0\n")
	if err := w.Add("a", a); err != nil {
		t.Fatal(err)
	}
	if err := w.Add("b", b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.eventsFile(), []byte("oom 1\noom_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "no notification for a", func() bool { return c.of("a") > 0 })
	if n := c.of("b"); n != 0 {
		t.Errorf("b notified %d times; only a's file changed", n)
	}
	w.Remove("a")
	if w.watching() != 1 {
		t.Errorf("watching %d cgroups after Remove, want 1", w.watching())
	}
	before := c.of("a")
	os.WriteFile(a.eventsFile(), []byte("oom 2\noom_kill 2\n"), 0o644)
	os.WriteFile(b.eventsFile(), []byte("oom 1\noom_kill 1\n"), 0o644)
	testkit.Eventually(t, 5*time.Second, "no notification for b", func() bool { return c.of("b") > 0 })
	if n := c.of("a"); n != before {
		t.Errorf("a notified after Remove")
	}
}

func TestWatcherRefusesWhatItCannotWatch(t *testing.T) {
	t.Parallel()
	w, err := NewWatcher((&calls{}).notify, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "gone")
	// A cgroup2 hierarchy without the memory controller has no memory.events.
	if err := w.Add("v2", Memory{Dir: missing, Unified: true}); err == nil {
		t.Error("Add of a v2 cgroup without memory.events succeeded")
	}
	if err := w.Add("v1", Memory{Dir: missing}); err == nil {
		t.Error("Add of a v1 cgroup without memory.oom_control succeeded")
	}
	if w.watching() != 0 {
		t.Errorf("watching %d after failed Adds", w.watching())
	}
	w.Remove("never-added")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Run(ctx) // ends at once, and closes the watcher
	if err := w.Add("late", fakeCgroup(t, true, "oom_kill 0\n")); !errors.Is(err, ErrStopped) {
		t.Errorf("Add after Run ended: %v, want ErrStopped", err)
	}
}

// v1Cgroup makes a real v1 memory cgroup with limit bytes, removed when the test ends.
func v1Cgroup(t *testing.T, limit int) Memory {
	t.Helper()
	testkit.RequireRoot(t)
	root := filepath.Join(Root, "memory")
	_, err := os.Stat(filepath.Join(root, "memory.oom_control"))
	if err != nil || isUnified(Root) {
		testkit.Missing(t, "no cgroup v1 memory controller on this host")
	}
	dir := filepath.Join(root, "shimwalk-test", fmt.Sprintf("oomwatch-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The test's own cleanup has killed and reaped every process it put here, but a v1
		// cgroup whose task the OOM killer ended can stay busy a moment after the reap, while
		// the kernel finishes taking that task out: EBUSY is retried, anything else is an error.
		var err error
		testkit.Eventually(t, 10*time.Second, "the cgroup stays busy", func() bool {
			err = os.Remove(dir)
			return !errors.Is(err, syscall.EBUSY)
		})
		if err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
		os.Remove(filepath.Dir(dir)) // fails while other tests use it
	})
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(fmt.Sprint(limit)), 0o644); err != nil && f == "memory.limit_in_bytes" {
			t.Fatal(err)
		}
	}
	return Memory{Dir: dir}
}

// hog runs a process in m that allocates without end once started, and kills it by pid when
// the test ends. It returns the process and a function that lets it start allocating.
func hog(t *testing.T, m Memory, keepGoing bool) (*exec.Cmd, func()) {
	t.Helper()
	testkit.RequireCommand(t, "busybox")
	// tail keeps the last lines of its input, and /dev/zero has none: it grows until killed.
	script := "read go; busybox tail /dev/zero"
	if keepGoing {
		script = "read go; busybox tail /dev/zero; echo survived; read wait"
	}
	cmd := exec.Command("sh", "-c", script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err := os.WriteFile(filepath.Join(m.Dir, "cgroup.procs"), []byte(fmt.Sprint(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	return cmd, func() { io.WriteString(in, "go\n") }
}

// TestWatcherV1RealKernel registers an eventfd on a real v1 memory cgroup and has a child
// of the cgroup's first process allocate past its limit: the OOM killer ends the child, the
// first process lives on, and the watcher tells, once.
func TestWatcherV1RealKernel(t *testing.T) {
	t.Parallel()
	m := v1Cgroup(t, 32<<20)
	c := &calls{seen: map[string]uint64{}, count: func(string) uint64 {
		n, _ := m.OOMKills()
		return n
	}}
	w, err := NewWatcher(c.notify, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	cmd, start := hog(t, m, true)
	if err := w.Add("c", m); err != nil {
		t.Fatal(err)
	}
	start()
	testkit.Eventually(t, 20*time.Second, "the watcher never saw the kill", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.seen["c"] == 1
	})
	if n, err := m.OOMKills(); err != nil || n != 1 {
		t.Errorf("oom_kill = %d, %v; want 1", n, err)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the cgroup's first process did not survive its child's OOM kill: %v", err)
	}
	w.Remove("c")
	if w.watching() != 0 {
		t.Errorf("watching %d after Remove", w.watching())
	}
}
