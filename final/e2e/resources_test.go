// SPDX-License-Identifier: Apache-2.0

package e2e

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

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// testOOMExec runs an exec past the container's 32 MiB limit: the OOM killer ends the exec,
// containerd learns /tasks/oom for the container before the exec's /tasks/exit, and the
// container keeps running.
func (e *env) testOOMExec(t *testing.T) {
	e = e.sub(t)
	id := e.container("oomexec")
	seen := e.watchEvents(t)
	e.runDetached(id, []string{"--memory-limit", "33554432"}, "/bin/sleep", "100")
	// tail keeps the last lines of its input, and /dev/zero has no line end.
	r := e.ctr("task", "exec", "--fifo-dir", e.fifoDir(), "--exec-id", "hog", id, "/bin/tail", "/dev/zero")
	if r.Code != 137 {
		t.Errorf("ctr task exec past the memory limit exited %d, want 137: %s", r.Code, r.Stderr)
	}
	e.waitTopics(seen, id, "/tasks/oom", "/tasks/exit")
	e.waitStatus(id, "RUNNING")
	if r := e.ctr("task", "kill", "-s", "KILL", id); r.Code != 0 {
		t.Fatalf("ctr task kill: %s", r.Stderr)
	}
	e.waitStatus(id, "STOPPED")
	// The kill of the init is no OOM kill, and the earlier one is not reported again.
	e.waitTopics(seen, id, "/tasks/oom", "/tasks/exit", "/tasks/exit")
}

// updateTask calls containerd's Tasks.Update over gRPC, which ctr of neither generation offers.
func (e *env) updateTask(t *testing.T, id string, resources *anypb.Any) error {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+e.c.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "containerd-namespace", e.c.Namespace)
	_, err = tasks.NewTasksClient(conn).Update(ctx, &tasks.UpdateTaskRequest{ContainerID: id, Resources: resources})
	return err
}

// resources is r as containerd's client sends it: JSON, under the type URL it registers
// LinuxResources with.
func resources(t *testing.T, r *specs.LinuxResources) *anypb.Any {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources", Value: data}
}

// memoryLimit reads memory.limit_in_bytes of the v1 memory cgroup that pid is in.
func memoryLimit(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.Contains(","+parts[1]+",", ",memory,") {
			continue
		}
		v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Fatalf("process %d has no v1 memory cgroup:\n%s", pid, data)
	return 0
}

// testUpdate lowers a running container's memory limit through containerd's Tasks API: the
// container's memory cgroup shows the new limit. A malformed request is refused and changes
// nothing.
func (e *env) testUpdate(t *testing.T) {
	e = e.sub(t)
	id := e.container("update")
	e.runDetached(id, []string{"--memory-limit", "67108864"}, "/bin/sleep", "100")
	pid := testkit.ReadPid(t, filepath.Join(e.c.Bundle(id), bundle.InitPidFile))
	if got := memoryLimit(t, pid); got != 64<<20 {
		t.Fatalf("memory.limit_in_bytes = %d before the update, want %d", got, 64<<20)
	}
	limit := int64(32 << 20)
	lower := resources(t, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}})
	if err := e.updateTask(t, id, lower); err != nil {
		t.Fatalf("Tasks.Update: %v", err)
	}
	if got := memoryLimit(t, pid); got != limit {
		t.Errorf("memory.limit_in_bytes = %d after the update, want %d", got, limit)
	}
	bad := &anypb.Any{TypeUrl: lower.TypeUrl, Value: []byte(`{"memory":{"limit":"lots"}}`)}
	if err := e.updateTask(t, id, bad); err == nil || !strings.Contains(err.Error(), "LinuxResources") {
		t.Errorf("Tasks.Update with malformed resources: %v, want the shim's refusal", err)
	}
	if err := e.updateTask(t, "no-such-task-"+id, lower); err == nil {
		t.Errorf("Tasks.Update of a task that does not exist succeeded")
	}
	if got := memoryLimit(t, pid); got != limit {
		t.Errorf("memory.limit_in_bytes = %d after refused updates, want %d", got, limit)
	}
	e.waitStatus(id, "RUNNING")
}
