// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
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
		"Create":     func() error { _, err := task.Create(ctx, &taskapi.CreateTaskRequest{ID: "unimpl"}); return err },
		"Start":      func() error { _, err := task.Start(ctx, &taskapi.StartRequest{ID: "unimpl"}); return err },
		"Delete":     func() error { _, err := task.Delete(ctx, &taskapi.DeleteRequest{ID: "unimpl"}); return err },
		"Kill":       func() error { _, err := task.Kill(ctx, &taskapi.KillRequest{ID: "unimpl"}); return err },
		"Wait":       func() error { _, err := task.Wait(ctx, &taskapi.WaitRequest{ID: "unimpl"}); return err },
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

func TestContainerdCreateIsNotImplemented(t *testing.T) {
	t.Parallel()
	c := testkit.StartContainerd(t)
	shim, rootfs := shimBinary(t), testkit.Rootfs(t)
	r := c.Ctr(t, "run", "--runtime", shim, "--rootfs", rootfs, "s02-create", "echo", "hi")
	t.Cleanup(func() { c.Ctr(t, "container", "delete", "s02-create") })
	if r.Code == 0 {
		t.Fatalf("ctr run succeeded; step 02 has no Create")
	}
	if !strings.Contains(r.Stderr, "Create: added in step 03-runc-create") {
		t.Errorf("ctr's error does not say Create is not implemented: %q", r.Stderr)
	}
	// containerd cleans up after a failed create in the background.
	testkit.Eventually(t, 10*time.Second, "step-02 shim still running after the failed create", func() bool {
		return len(c.Shims("s02-create")) == 0
	})
	testkit.Eventually(t, 10*time.Second, "bundle left behind", func() bool {
		_, err := os.Stat(c.Bundle("s02-create"))
		return os.IsNotExist(err)
	})
	entries, _ := os.ReadDir(c.SocketDir)
	for _, e := range entries {
		t.Errorf("socket left behind: %s", e.Name())
	}
}
