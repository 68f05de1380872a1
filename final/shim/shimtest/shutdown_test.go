// SPDX-License-Identifier: Apache-2.0

// How the long-lived shim stops: its Shutdown reply, and its socket, which a start for the same
// id may already have replaced (the end of containerd's runc shim, pkg/shim serve and
// cleanupSockets, made reliable).
package shimtest

import (
	"context"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// TestShutdownReplies: the reply to Shutdown reaches the caller before the shim exits, every
// time. A shim that closes the connection as soon as Shutdown asks it to go loses the reply
// it has not yet written, and the caller sees a closed connection instead.
func TestShutdownReplies(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for i := range 100 {
		id := fmt.Sprintf("reply%d", i)
		r := c.run(nil, nil, c.args(id, "start")...)
		if r.Code != 0 {
			t.Fatalf("start: exit %d, stderr %q", r.Code, r.Stderr)
		}
		pid := testkit.ReadPid(t, filepath.Join(c.dir, bundle.ShimPidFile))
		b, err := driver.ParseStartReply([]byte(r.Stdout))
		if err != nil {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatal(err)
		}
		conn := c.dial(b)
		_, err = conn.Task.Shutdown(rpcCtx(t, 10*time.Second), &taskapi.ShutdownRequest{ID: id})
		conn.Close()
		if err != nil {
			t.Errorf("Shutdown %d: %v, want its reply", i, err)
		}
		testkit.ExpectGone(t, pid, "shim "+id)
		if _, err := os.Lstat(b.SocketPath()); !os.IsNotExist(err) {
			t.Errorf("shim %s left its socket: %v", id, err)
		}
	}
}

// TestStoppingShimTakesNoNewWork: once a shim has answered Shutdown, an RPC on a connection
// still open is refused as Unavailable (a Create would start a container the exiting shim
// abandons), and the shim waits for that client to hang up rather than cut it off.
func TestStoppingShimTakesNoNewWork(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	b, pid := c.started(c.run(nil, nil, c.args("nowork", "start")...))
	first, second := c.dial(b), c.dial(b)
	if _, err := first.Task.Shutdown(rpcCtx(t, 10*time.Second), &taskapi.ShutdownRequest{ID: "nowork"}); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	first.Close()
	_, err := second.Task.State(rpcCtx(t, 10*time.Second), &taskapi.StateRequest{ID: "nowork"})
	expectCode(t, "State after Shutdown", err, codes.Unavailable)
	second.Close()
	testkit.ExpectGone(t, pid, "shim after Shutdown")
}

// TestStoppingShimLeavesANewSocket: a shim that stops (here on SIGTERM, with an RPC still in
// flight) gives up its socket's name at once, and never removes a socket a new start for the
// same id put there since (a container restarted with its id, as Docker does): that shim would
// be unreachable after containerd's next restart.
func TestStoppingShimLeavesANewSocket(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	runc := testkit.NewFaultyRunc(t)
	id := "resocket"
	k := testkit.NewTask(t, d, id, testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	if _, err := k.Conn.Task.Create(k.Ctx(), req); err != nil {
		t.Fatal(err)
	}
	k.Start()
	old, err := driver.ReadBootstrap(k.Bundle)
	if err != nil {
		t.Fatal(err)
	}

	// A Kill held in runc keeps the old shim stopping for as long as the test likes.
	runc.Set(t, "kill", testkit.Block)
	t.Cleanup(func() { runc.Clear(t, "kill") })
	killed := make(chan error, 1)
	go func() {
		_, err := k.Conn.Task.Kill(context.Background(), &taskapi.KillRequest{ID: id, Signal: 9})
		killed <- err
	}()
	runc.WaitReached(t, "kill", 20*time.Second)
	// A reply sent on the Kill's connection after the Kill arrived: ttrpc then knows that
	// connection busy, and waits for it when the server shuts down.
	if _, err := k.Conn.Task.State(k.Ctx(), &taskapi.StateRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(k.ShimPid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the stopping shim still accepts connections", func() bool {
		nc, err := net.Dial("unix", old.SocketPath())
		if err == nil {
			nc.Close()
		}
		return err != nil
	})

	// The same id started again, from a bundle of its own, as after a container's restart.
	dir := testkit.TempDir(t)
	cmd := startByHand(t, dir, d, id)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("second start: %v, stderr %s", err, stderrOf(err))
	}
	newPid := testkit.ReadPid(t, filepath.Join(dir, bundle.ShimPidFile))
	b, err := driver.ParseStartReply(out)
	if err != nil {
		syscall.Kill(newPid, syscall.SIGKILL)
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdownAt(t, b.Address, newPid) })
	if b.SocketPath() != old.SocketPath() {
		t.Fatalf("the second shim is at %s, not at the old shim's %s: the test proves nothing", b.SocketPath(), old.SocketPath())
	}

	runc.Clear(t, "kill")
	<-killed
	testkit.ExpectGone(t, k.ShimPid, "stopped shim")
	conn, err := driver.Dial(rpcCtx(t, 5*time.Second), b.Address)
	if err != nil {
		t.Fatalf("the new shim's socket is gone once the old shim stopped: %v", err)
	}
	defer conn.Close()
	resp, err := conn.Task.Connect(rpcCtx(t, 5*time.Second), &taskapi.ConnectRequest{})
	if err != nil || int(resp.ShimPid) != newPid {
		t.Errorf("Connect at %s: %v, %v; want shim %d", b.Address, resp, err, newPid)
	}
}

// startByHand is the start action of task id run by hand in the bundle dir, with d's flags and
// environment.
func startByHand(t *testing.T, dir string, d *driver.Driver, id string) *osexec.Cmd {
	t.Helper()
	cmd := osexec.Command(d.Shim, "-namespace", d.Namespace, "-address", d.Address, "-id", id, "start")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), d.Env...)
	cmd.Env = append(cmd.Env, "TTRPC_ADDRESS="+d.TTRPCAddress)
	return cmd
}

func stderrOf(err error) string {
	if ee, ok := err.(*osexec.ExitError); ok {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
