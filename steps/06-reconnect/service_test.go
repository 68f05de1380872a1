// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func rpcContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConnectAndState(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, pid := startShim(t, d, "svc")
	c := dial(t, b)
	ctx := rpcContext(t)

	resp, err := c.Task.Connect(ctx, &taskapi.ConnectRequest{ID: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	if int(resp.ShimPid) != pid || resp.Version == "" {
		t.Errorf("Connect = pid %d version %q, want pid %d and a version", resp.ShimPid, resp.Version, pid)
	}
	_, err = c.Task.State(ctx, &taskapi.StateRequest{ID: "other"})
	if driver.Code(err) != codes.NotFound {
		t.Errorf("State of an unknown id: %v, want NotFound", err)
	}
	_, err = c.Task.State(ctx, &taskapi.StateRequest{})
	if driver.Code(err) != codes.InvalidArgument {
		t.Errorf("State with no id: %v, want InvalidArgument", err)
	}
}

func TestUnimplementedNamesItsStep(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, _ := startShim(t, d, "unimpl")
	task := dial(t, b).Task
	ctx := rpcContext(t)
	calls := map[string]func() error{
		"Pids":       func() error { _, err := task.Pids(ctx, &taskapi.PidsRequest{ID: "unimpl"}); return err },
		"Pause":      func() error { _, err := task.Pause(ctx, &taskapi.PauseRequest{ID: "unimpl"}); return err },
		"Resume":     func() error { _, err := task.Resume(ctx, &taskapi.ResumeRequest{ID: "unimpl"}); return err },
		"Checkpoint": func() error { _, err := task.Checkpoint(ctx, &taskapi.CheckpointTaskRequest{ID: "unimpl"}); return err },
		"Exec":       func() error { _, err := task.Exec(ctx, &taskapi.ExecProcessRequest{ID: "unimpl"}); return err },
		"ResizePty":  func() error { _, err := task.ResizePty(ctx, &taskapi.ResizePtyRequest{ID: "unimpl"}); return err },
		"CloseIO":    func() error { _, err := task.CloseIO(ctx, &taskapi.CloseIORequest{ID: "unimpl"}); return err },
		"Update":     func() error { _, err := task.Update(ctx, &taskapi.UpdateTaskRequest{ID: "unimpl"}); return err },
		"Stats":      func() error { _, err := task.Stats(ctx, &taskapi.StatsRequest{ID: "unimpl"}); return err },
	}
	for name, call := range calls {
		err := call()
		if driver.Code(err) != codes.Unimplemented {
			t.Errorf("%s: %v, want Unimplemented", name, err)
			continue
		}
		if msg := driver.Message(err); !strings.HasPrefix(msg, name+": added in ") {
			t.Errorf("%s: message %q does not name the step that adds it", name, msg)
		}
	}
}

func TestOtherUserIsRefused(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, pid := startShim(t, d, "creds")
	// Open the file modes so that only the credential check stands between nobody and the shim.
	for _, p := range []string{filepath.Dir(filepath.Dir(b.SocketPath())), filepath.Dir(b.SocketPath())} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(b.SocketPath(), 0o666); err != nil {
		t.Fatal(err)
	}
	r := testkit.RunHelper(t, 65534, 65534, "ttrpc-connect", b.Address)
	// 1, not 3: the connection was made (the socket's mode let it through) and then refused.
	if r.Code != 1 {
		t.Fatalf("a client running as nobody: exit %d, want 1 (connected, then refused); stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	// The refused peer did not hurt the shim.
	if got := shimPidAt(t, b); got != pid {
		t.Errorf("after the refused peer, Connect answered pid %d, want %d", got, pid)
	}
	// And root, the shim's own user, passes the same helper.
	if r := testkit.RunHelper(t, 0, 0, "ttrpc-connect", b.Address); r.Code != 0 || strings.TrimSpace(r.Stdout) != strconv.Itoa(pid) {
		t.Errorf("helper as root: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, pid := startShim(t, d, "down")
	ctx := rpcContext(t)
	// The reply comes before the shim goes: a closed connection is no answer (containerd
	// tolerates one, but the shim does not count on that).
	c := dial(t, b)
	if _, err := c.Task.Shutdown(ctx, &taskapi.ShutdownRequest{ID: "down"}); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	c.Close() // as containerd does once it has the reply
	testkit.ExpectGone(t, pid, "shim after Shutdown")
	if _, err := os.Lstat(b.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("socket left after Shutdown")
	}
}

func TestGarbageDoesNotKillTheShim(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, pid := startShim(t, d, "garbage")
	send := func(data []byte) {
		conn, err := net.Dial("unix", b.SocketPath())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(data)
		conn.Close()
	}
	noise := make([]byte, 4096)
	rand.Read(noise)
	send(noise)
	// A ttrpc header announcing a 1000-byte request, followed by 10 bytes and a hang-up.
	header := make([]byte, 10)
	binary.BigEndian.PutUint32(header[0:4], 1000)
	binary.BigEndian.PutUint32(header[4:8], 1)
	header[8] = 1 // request
	send(append(header, noise[:10]...))
	// A complete frame whose payload is not a Request.
	binary.BigEndian.PutUint32(header[0:4], 16)
	send(append(header, noise[:16]...))

	if got := shimPidAt(t, b); got != pid {
		t.Errorf("after garbage, Connect answered pid %d, want %d", got, pid)
	}
	// A well-framed call whose body is not the request message is InvalidArgument.
	code, msg := testkit.RawCall(t, b.SocketPath(), "containerd.task.v2.Task", "State", []byte{0xff, 0xff, 0xff})
	if code != codes.InvalidArgument || !strings.Contains(msg, "malformed request") {
		t.Errorf("State with a malformed body: %v %q, want InvalidArgument", code, msg)
	}
	if got := shimPidAt(t, b); got != pid {
		t.Errorf("after a malformed request, Connect answered pid %d, want %d", got, pid)
	}
}

func TestWaitWakesEveryWaiter(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "waiters", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	const n = 10
	results := make(chan *taskapi.WaitResponse, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			resp, err := k.Conn.Task.Wait(k.Ctx(), &taskapi.WaitRequest{ID: k.ID})
			if err != nil {
				errs <- err
				return
			}
			results <- resp
		}()
	}
	// Every waiter is blocked until the container is killed.
	select {
	case r := <-results:
		t.Fatalf("a Wait returned before the exit: %v", r)
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatal(err)
	}
	var first *taskapi.WaitResponse
	for i := 0; i < n; i++ {
		select {
		case r := <-results:
			if first == nil {
				first = r
			}
			if r.ExitStatus != 137 || !r.ExitedAt.AsTime().Equal(first.ExitedAt.AsTime()) {
				t.Errorf("waiter %d got %d at %v, want 137 at %v", i, r.ExitStatus, r.ExitedAt.AsTime(), first.ExitedAt.AsTime())
			}
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d waiters woke", i, n)
		}
	}
	// A Wait after the exit answers at once with the same exit.
	resp, err := k.Conn.Task.Wait(k.Ctx(), &taskapi.WaitRequest{ID: k.ID})
	if err != nil || resp.ExitStatus != 137 || !resp.ExitedAt.AsTime().Equal(first.ExitedAt.AsTime()) {
		t.Errorf("Wait after the exit: %v, %v", resp, err)
	}
}

func TestCancelledWaitReturns(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "cancel", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := k.Conn.Task.Wait(ctx, &taskapi.WaitRequest{ID: k.ID})
	if !errors.Is(err, context.DeadlineExceeded) && driver.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Wait with an expiring context: %v, want DeadlineExceeded", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("cancelled Wait took %v to return", took)
	}
	// The shim dropped the abandoned waiter and still answers.
	if st := k.State(); st.Status != task.Status_RUNNING {
		t.Errorf("after the cancelled Wait the task is %v", st.Status)
	}
}

// TestTrueNeverLosesItsExit starts /bin/true 100 times: it can exit, and be reaped, before
// runc start returns. Each Wait must still return, with status 0. The test waits with a
// deadline; it never sleeps and hopes.
func TestTrueNeverLosesItsExit(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "true", testkit.TaskOptions{Args: []string{"true"}, NullIO: true})
	for i := 0; i < 100; i++ {
		k.Run()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := k.Conn.Task.Wait(ctx, &taskapi.WaitRequest{ID: k.ID})
		cancel()
		if err != nil {
			t.Fatalf("run %d: Wait: %v", i, err)
		}
		if resp.ExitStatus != 0 {
			t.Fatalf("run %d: exit status %d", i, resp.ExitStatus)
		}
		if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
			t.Fatalf("run %d: Delete: %v", i, err)
		}
	}
}
