// SPDX-License-Identifier: Apache-2.0

// Package shimtest drives the built containerd-shim-shimwalk-v2 the way containerd would, for
// what final/e2e cannot reach through ctr: the bootstrap replies byte by byte, input no
// containerd sends, the Task API's error codes, and races that ctr is too slow to provoke.
package shimtest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// shimBinary builds the final shim once per test process.
func shimBinary(t *testing.T) string {
	t.Helper()
	testkit.RequireRoot(t)
	return testkit.Binary(t, "final/cmd/containerd-shim-shimwalk-v2")
}

// rpcCtx bounds one RPC, so that a shim that hangs fails the test instead of hanging it.
func rpcCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// expectCode fails the test unless err carries the status code want.
func expectCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := driver.Code(err); got != want {
		t.Errorf("%s: got %v (%v), want %v", what, got, err, want)
	}
}

// execSpec is an exec's process spec as containerd sends it: JSON in an Any.
func execSpec(t *testing.T, args ...string) *anypb.Any {
	t.Helper()
	data, err := json.Marshal(specs.Process{
		Args: args, Cwd: "/",
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process", Value: data}
}

// waitExec waits for an exec (or the init, with execID "") to exit, within a bounded time.
func waitExec(t *testing.T, k *testkit.Task, execID string) *taskapi.WaitResponse {
	t.Helper()
	resp, err := k.Conn.Task.Wait(rpcCtx(t, 10*time.Second), &taskapi.WaitRequest{ID: k.ID, ExecID: execID})
	if err != nil {
		t.Fatalf("Wait %s/%s: %v", k.ID, execID, err)
	}
	return resp
}

// nextEvents reads events n, n+1, ... until it has count of them.
func nextEvents(t *testing.T, s *driver.EventServer, n, count int) []driver.Event {
	t.Helper()
	ctx := rpcCtx(t, 20*time.Second)
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

// processesWithArg lists the live processes that have value as one of their arguments.
func processesWithArg(value string) []int {
	return driver.ProcessesWhere(func(args []string) bool { return slices.Contains(args, value) })
}

// shutdownAt ends the shim serving address with the Shutdown RPC and waits until pid is gone.
// It is the cleanup of a shim a test started by hand, without a task.
func shutdownAt(t *testing.T, address string, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := driver.Dial(ctx, address); err == nil {
		// The final shim's reply always comes: a closed connection is no shutdown here.
		if _, err := c.Task.Shutdown(ctx, &taskapi.ShutdownRequest{}); err != nil {
			t.Errorf("Shutdown at %s: %v", address, err)
		}
		c.Close()
	} else if !errors.Is(err, os.ErrNotExist) && pid > 0 && driver.Alive(pid) {
		t.Errorf("dial %s: %v", address, err)
	}
	if pid > 0 {
		testkit.ExpectGone(t, pid, "shim at "+address)
	}
	socket := driver.Bootstrap{Address: address}.SocketPath()
	if _, err := os.Lstat(socket); !os.IsNotExist(err) {
		t.Errorf("the shim left its socket %s", socket)
	}
}
