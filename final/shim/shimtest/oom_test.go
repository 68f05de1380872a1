// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// limitMemory sets the memory limit in the config.json of bundle, as `ctr run --memory-limit`
// would.
func limitMemory(t *testing.T, dir string, limit int64) {
	t.Helper()
	editSpec(t, dir, func(spec *specs.Spec) {
		if spec.Linux.Resources == nil {
			spec.Linux.Resources = &specs.LinuxResources{}
		}
		spec.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &limit}
	})
}

// requireMemoryCgroup skips (or fails under CI) where the container would have no memory
// controller to limit it.
func requireMemoryCgroup(t *testing.T) {
	t.Helper()
	_, v1 := os.Stat("/sys/fs/cgroup/memory/memory.oom_control")
	v2, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	requireLayout(t, v1 == nil || slices.Contains(strings.Fields(string(v2)), "memory"), "no memory controller on this host")
}

// hog is a command that allocates until the OOM killer ends it: tail keeps the last lines of
// its input, and /dev/zero has no line end.
const hog = "tail /dev/zero"

// oomRun starts a container limited to 32 MiB and returns it with the events it publishes.
func oomRun(t *testing.T, id string, args ...string) (*testkit.Task, *driver.EventServer, int) {
	t.Helper()
	requireMemoryCgroup(t)
	d := testkit.NewDriver(t, shimBinary(t))
	events := testkit.Events(t, d)
	k := testkit.NewTask(t, d, id, testkit.TaskOptions{Args: args, NullIO: true})
	limitMemory(t, k.Bundle, 32<<20)
	return k, events, k.Run()
}

// endTask kills the container's init and deletes it, so that its events are complete.
func endTask(t *testing.T, k *testkit.Task) {
	t.Helper()
	if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatal(err)
	}
	waitExec(t, k, "")
	if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
}

func checkOOMEvents(t *testing.T, k *testkit.Task, events []driver.Event) {
	t.Helper()
	for _, e := range events {
		if e.Topic != "/tasks/oom" {
			continue
		}
		if oom, _ := e.Event.(*eventstypes.TaskOOM); oom == nil || oom.ContainerID != k.ID {
			t.Errorf("TaskOOM = %v, want container %s", e.Event, k.ID)
		}
	}
}

// TestOOMOfAnExec: an exec allocates past the container's limit. The OOM killer ends it, the
// init runs on, and one TaskOOM for the container comes before the exec's TaskExit.
func TestOOMOfAnExec(t *testing.T) {
	t.Parallel()
	k, events, _ := oomRun(t, "oom-exec", "/bin/sleep", "100")
	svc := k.Conn.Task
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "hog", Spec: execSpec(t, "sh", "-c", hog)}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "hog"}); err != nil {
		t.Fatal(err)
	}
	if w := waitExec(t, k, "hog"); w.ExitStatus != 137 {
		t.Errorf("the exec past the limit exited %d, want 137 (SIGKILL)", w.ExitStatus)
	}
	if st := k.State(); st.Status != task.Status_RUNNING {
		t.Errorf("container is %v after its exec's OOM kill, want RUNNING", st.Status)
	}
	got := nextEvents(t, events, 0, 6)
	want := "/tasks/create /tasks/start /tasks/exec-added /tasks/exec-started /tasks/oom /tasks/exit"
	if s := topics(got); s != want {
		t.Fatalf("events: %s\nwant:   %s", s, want)
	}
	if x, _ := got[5].Event.(*eventstypes.TaskExit); x == nil || x.ID != "hog" || x.ExitStatus != 137 {
		t.Errorf("TaskExit = %v, want the exec's, 137", got[5].Event)
	}
	endTask(t, k)
	// The watcher's signal and the exec's exit both noticed the one kill: one TaskOOM.
	all := nextEvents(t, events, 0, 8)
	if s := topics(all); s != want+" /tasks/exit /tasks/delete" {
		t.Errorf("events: %s\nwant:   %s /tasks/exit /tasks/delete", s, want)
	}
	checkOOMEvents(t, k, all)
}

// TestOOMOfAChildOfTheInit: a process the init forked allocates past the limit. No process the
// shim reaps exits, so only the cgroup watcher can tell: TaskOOM arrives while the container
// keeps running, and the init's later exit does not repeat it.
func TestOOMOfAChildOfTheInit(t *testing.T) {
	t.Parallel()
	// The child starts allocating once the test says so, after Start: the order of TaskStart
	// and TaskOOM is then fixed.
	script := fmt.Sprintf("until [ -e /tmp/go ]; do sleep 0.05; done; %s; echo survived > /tmp/survived; exec sleep 100", hog)
	k, events, pid := oomRun(t, "oom-child", "/bin/sh", "-c", script)
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/root/tmp/go", pid), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := nextEvents(t, events, 0, 3)
	if s := topics(got); s != "/tasks/create /tasks/start /tasks/oom" {
		t.Fatalf("events: %s\nwant:   /tasks/create /tasks/start /tasks/oom", s)
	}
	testkit.Eventually(t, 10*time.Second, "the init never went on after its child's OOM kill", func() bool {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/root/tmp/survived", pid))
		return strings.TrimSpace(string(data)) == "survived"
	})
	if st := k.State(); st.Status != task.Status_RUNNING || st.Pid != uint32(pid) {
		t.Errorf("container is %v (pid %d) after the OOM kill of a child, want RUNNING (pid %d)", st.Status, st.Pid, pid)
	}
	endTask(t, k)
	all := nextEvents(t, events, 0, 5)
	if s := topics(all); s != "/tasks/create /tasks/start /tasks/oom /tasks/exit /tasks/delete" {
		t.Errorf("events: %s\nwant:   /tasks/create /tasks/start /tasks/oom /tasks/exit /tasks/delete", s)
	}
	checkOOMEvents(t, k, all)
}
