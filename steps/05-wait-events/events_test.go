// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// nextEvents reads events n, n+1, ... until it has count of them.
func nextEvents(t *testing.T, s *driver.EventServer, n, count int) []driver.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []driver.Event
	for i := n; i < n+count; i++ {
		e, err := s.Next(ctx, i)
		if err != nil {
			t.Fatalf("event %d never arrived (have %s)", i, topics(s.Events()))
		}
		got = append(got, e)
	}
	return got
}

func topics(events []driver.Event) string {
	var names []string
	for _, e := range events {
		names = append(names, e.Topic)
	}
	return strings.Join(names, " ")
}

func TestLifecycleEvents(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	events := testkit.Events(t, d)
	k := testkit.NewTask(t, d, "events", testkit.TaskOptions{Args: []string{"sh", "-c", "exit 4"}, NullIO: true})
	pid := uint32(k.Run())
	if _, err := k.Conn.Task.Wait(k.Ctx(), &taskapi.WaitRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	got := nextEvents(t, events, 0, 4)
	if s := topics(got); s != "/tasks/create /tasks/start /tasks/exit /tasks/delete" {
		t.Fatalf("topics = %s", s)
	}
	for _, e := range got {
		if e.Namespace != d.Namespace || e.Timestamp.IsZero() {
			t.Errorf("%s: namespace %q, time %v", e.Topic, e.Namespace, e.Timestamp)
		}
	}
	create, _ := got[0].Event.(*eventstypes.TaskCreate)
	start, _ := got[1].Event.(*eventstypes.TaskStart)
	exit, _ := got[2].Event.(*eventstypes.TaskExit)
	del, _ := got[3].Event.(*eventstypes.TaskDelete)
	if create == nil || create.ContainerID != k.ID || create.Pid != pid || create.Bundle != k.Bundle {
		t.Errorf("TaskCreate = %v", got[0].Event)
	}
	if start == nil || start.ContainerID != k.ID || start.Pid != pid {
		t.Errorf("TaskStart = %v", got[1].Event)
	}
	if exit == nil || exit.ContainerID != k.ID || exit.ID != k.ID || exit.Pid != pid || exit.ExitStatus != 4 || exit.ExitedAt == nil {
		t.Errorf("TaskExit = %v", got[2].Event)
	}
	// containerd's TaskDelete names the container only: ID is an exec's, and a task's delete
	// is no exec's.
	if del == nil || del.ContainerID != k.ID || del.ID != "" || del.Pid != pid || del.ExitStatus != 4 {
		t.Errorf("TaskDelete = %v", got[3].Event)
	}
}

// TestEarlyExitComesAfterStart: /bin/true can exit, and be reaped, before runc start returns.
// A wrapper holds the first runc start until the exit has reached the service, so that this
// happens every time; the events must still come as create, start, exit, delete. Then twenty
// ordinary runs, where the race is left to chance.
func TestEarlyExitComesAfterStart(t *testing.T) {
	t.Parallel()
	k, dir := holdingTask(t, "early", "start", "true")
	events := testkit.Events(t, k.D)
	k.Create()
	started := make(chan error, 1)
	go func() {
		_, err := k.Conn.Task.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID})
		started <- err
	}()
	testkit.Eventually(t, 20*time.Second, "the exit of /bin/true never reached the service", func() bool {
		data, _ := os.ReadFile(filepath.Join(k.Bundle, "shim.log"))
		return strings.Contains(string(data), "exit held until its start is announced") || strings.Contains(string(data), "init exited")
	})
	if err := os.Remove(filepath.Join(dir, "holding")); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	const runs = 20
	for i := 0; i <= runs; i++ {
		if i > 0 {
			k.Run()
		}
		if _, err := k.Conn.Task.Wait(k.Ctx(), &taskapi.WaitRequest{ID: k.ID}); err != nil {
			t.Fatal(err)
		}
		if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
			t.Fatal(err)
		}
	}
	got := nextEvents(t, events, 0, 4*(runs+1))
	want := strings.TrimSpace(strings.Repeat("/tasks/create /tasks/start /tasks/exit /tasks/delete ", runs+1))
	if s := topics(got); s != want {
		t.Errorf("topics out of order:\n%s", s)
	}
}

func TestContainerdRunRm(t *testing.T) {
	t.Parallel()
	c := testkit.StartContainerd(t)
	shim, rootfs := shimBinary(t), testkit.Rootfs(t)

	// ctr events, started first, sees everything that follows.
	watch := c.CtrCommand(context.Background(), "events")
	var seen testkit.Buffer
	watch.Stdout = &seen
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		watch.Process.Kill()
		watch.Wait()
		if t.Failed() {
			t.Logf("ctr events printed:\n%s", seen.String())
		}
	})

	hi := c.Ctr(t, "run", "--rm", "--runtime", shim, "--rootfs", rootfs, "s05-hi", "/bin/echo", "hi")
	if hi.Code != 0 || hi.Stdout != "hi\n" {
		t.Errorf("ctr run --rm echo hi: exit %d, stdout %q, stderr %q", hi.Code, hi.Stdout, hi.Stderr)
	}
	three := c.Ctr(t, "run", "--rm", "--runtime", shim, "--rootfs", rootfs, "s05-three", "/bin/sh", "-c", "exit 3")
	if three.Code != 3 {
		t.Errorf("ctr run --rm sh -c 'exit 3' exited %d (%s)", three.Code, three.Stderr)
	}
	for _, id := range []string{"s05-hi", "s05-three"} {
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("ctr events shows the four task topics for %s", id), func() bool {
			var found []string
			for _, line := range strings.Split(seen.String(), "\n") {
				if !strings.Contains(line, `"container_id":"`+id+`"`) {
					continue
				}
				for _, f := range strings.Fields(line) {
					if strings.HasPrefix(f, "/tasks/") {
						found = append(found, f)
					}
				}
			}
			return strings.Join(found, " ") == "/tasks/create /tasks/start /tasks/exit /tasks/delete"
		})
		testkit.Eventually(t, 10*time.Second, "step-05 shim left for "+id, func() bool {
			return len(c.Shims(id)) == 0
		})
	}

}

// TestContainerd2RunRm is TestContainerdRunRm on containerd 2.x, which sends the shim a
// bootstrap.v1.BootstrapParams on stdin, parses its start reply as a BootstrapResult protobuf
// first and JSON second, and runs `shim -info`: the step's shim must still bootstrap and serve.
func TestContainerd2RunRm(t *testing.T) {
	t.Parallel()
	c := testkit.StartContainerd2(t)
	shim, rootfs := shimBinary(t), testkit.Rootfs(t)

	// ctr 2.x warns about cgroup v1 on stderr on this machine; only stdout is the container's.
	hi := c.Ctr(t, "run", "--rm", "--runtime", shim, "--rootfs", rootfs, "c2-hi", "/bin/echo", "hi")
	if hi.Code != 0 || hi.Stdout != "hi\n" {
		t.Errorf("ctr run --rm echo hi: exit %d, stdout %q, stderr %q", hi.Code, hi.Stdout, hi.Stderr)
	}
	three := c.Ctr(t, "run", "--rm", "--runtime", shim, "--rootfs", rootfs, "c2-three", "/bin/sh", "-c", "exit 3")
	if three.Code != 3 {
		t.Errorf("ctr run --rm sh -c 'exit 3' exited %d (%s)", three.Code, three.Stderr)
	}
	for _, id := range []string{"c2-hi", "c2-three"} {
		testkit.Eventually(t, 10*time.Second, "shim left for "+id, func() bool {
			return len(c.Shims(id)) == 0
		})
	}
}
