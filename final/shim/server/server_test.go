// SPDX-License-Identifier: Apache-2.0

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// guard bounds every wait for the server, so that a server that never stops fails the test
// instead of hanging it; nothing is asserted about how long the wait took.
const guard = time.Minute

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// shim is Serve running in the test process on a socket of its own. The tests that serve run
// one at a time: Serve makes the process a subreaper and reaps all of its children.
type shim struct {
	path string
	done chan error
	once sync.Once
	err  error
}

func serve(t *testing.T, version string) *shim {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shim.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	// As the listener inherited on fd 3: closing it leaves the file to Serve.
	ln.SetUnlinkOnClose(false)
	s := &shim{path: path, done: make(chan error, 1)}
	go func() {
		s.done <- Serve(Config{Namespace: "ns", ID: "id", Version: version, Log: discard, Listener: ln})
	}()
	t.Cleanup(func() {
		// A test that failed before the shim stopped: stop it as containerd would.
		select {
		case <-s.done:
			return
		default:
		}
		if c, err := s.tryDial(); err == nil {
			_, _ = taskapi.NewTTRPCTaskClient(c).Shutdown(context.Background(), &taskapi.ShutdownRequest{})
			c.Close()
		}
		s.wait(t)
	})
	return s
}

func (s *shim) tryDial() (*ttrpc.Client, error) {
	conn, err := net.Dial("unix", s.path)
	if err != nil {
		return nil, err
	}
	return ttrpc.NewClient(conn), nil
}

func (s *shim) dial(t *testing.T) *ttrpc.Client {
	t.Helper()
	c, err := s.tryDial()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wait returns what Serve returned, once it has.
func (s *shim) wait(t *testing.T) error {
	t.Helper()
	s.once.Do(func() {
		select {
		case s.err = <-s.done:
		case <-time.After(guard):
			s.err = errors.New("Serve did not return")
		}
	})
	return s.err
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return c
}

// One service answers under both Task API names, with the version it was configured with, and
// a request that does not decode is refused as such.
func TestServesTaskV2AndV3(t *testing.T) {
	s := serve(t, "v9.9.9-test")
	c := s.dial(t)
	defer c.Close()
	v2, err := taskapi.NewTTRPCTaskClient(c).Connect(ctx(t), &taskapi.ConnectRequest{ID: "none"})
	if err != nil {
		t.Fatalf("v2 Connect: %v", err)
	}
	var v3 taskapi.ConnectResponse
	if err := c.Call(ctx(t), "containerd.task.v3.Task", "Connect", &taskapi.ConnectRequest{ID: "none"}, &v3); err != nil {
		t.Fatalf("v3 Connect: %v", err)
	}
	for api, r := range map[string]*taskapi.ConnectResponse{"v2": v2, "v3": &v3} {
		if r.Version != "v9.9.9-test" || r.ShimPid != uint32(os.Getpid()) || r.TaskPid != 0 {
			t.Errorf("%s Connect = version %q, shim pid %d, task pid %d; want %q, %d, 0", api, r.Version, r.ShimPid, r.TaskPid, "v9.9.9-test", os.Getpid())
		}
	}
	// A string field holding invalid UTF-8: the bytes frame, the message does not decode.
	err = c.Call(ctx(t), "containerd.task.v2.Task", "State", &wrapperspb.BytesValue{Value: []byte{0xff}}, &taskapi.StateResponse{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("undecodable State = %v, want InvalidArgument", err)
	}
	if _, err := taskapi.NewTTRPCTaskClient(c).State(ctx(t), &taskapi.StateRequest{ID: "none"}); status.Code(err) != codes.NotFound {
		t.Fatalf("State of no task = %v, want NotFound", err)
	}
}

// Shutdown with no task left ends the shim: its reply reaches the caller, every RPC after it is
// refused, and the shim goes once its client has hung up, taking its socket with it.
func TestShutdownDrainsThenStops(t *testing.T) {
	s := serve(t, "")
	c := s.dial(t)
	task := taskapi.NewTTRPCTaskClient(c)
	if _, err := task.Shutdown(ctx(t), &taskapi.ShutdownRequest{ID: "none"}); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// containerd sends a Shutdown after the Delete of each task of a group, and fails the
	// Delete unless it succeeds (or finds the connection closed): one that comes once the shim
	// is going succeeds, as containerd's runc shim answers it.
	if _, err := task.Shutdown(ctx(t), &taskapi.ShutdownRequest{ID: "other"}); err != nil && !errors.Is(err, ttrpc.ErrClosed) {
		t.Fatalf("a second Shutdown = %v, want success", err)
	}
	// ErrClosed only if the grace for hanging up ran out first, on a very slow machine.
	_, err := task.Connect(ctx(t), &taskapi.ConnectRequest{ID: "none"})
	if status.Code(err) != codes.Unavailable && !errors.Is(err, ttrpc.ErrClosed) {
		t.Fatalf("Connect after Shutdown = %v, want Unavailable", err)
	}
	c.Close()
	if err := s.wait(t); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := os.Lstat(s.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// SIGTERM stops the shim as Shutdown does.
func TestSIGTERMStops(t *testing.T) {
	s := serve(t, "")
	c := s.dial(t)
	// An answer means Serve has caught SIGTERM: it does so before it serves.
	if _, err := taskapi.NewTTRPCTaskClient(c).Connect(ctx(t), &taskapi.ConnectRequest{}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.wait(t); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := os.Lstat(s.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func call(h ttrpc.UnaryServerInterceptor, method ttrpc.Method, decodeErr error) (any, error) {
	return h(context.Background(), func(any) error { return decodeErr }, &ttrpc.UnaryServerInfo{FullMethod: "/test.Service/M"}, method)
}

// The interceptor turns a handler's panic into Internal, a request that does not decode into
// InvalidArgument, and refuses every RPC once the shim stops; each RPC it let in is counted out.
func TestIntercept(t *testing.T) {
	track := newTracker()
	h := intercept(discard, track)
	if _, err := call(h, func(context.Context, func(any) error) (any, error) { panic("handler bug") }, nil); status.Code(err) != codes.Internal {
		t.Fatalf("panicking handler = %v, want Internal", err)
	}
	decoding := func(_ context.Context, unmarshal func(any) error) (any, error) {
		if err := unmarshal(nil); err != nil {
			return nil, err
		}
		return "ok", nil
	}
	if _, err := call(h, decoding, errors.New("truncated")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("undecodable request = %v, want InvalidArgument", err)
	}
	if resp, err := call(h, decoding, nil); err != nil || resp != "ok" {
		t.Fatalf("plain request = %v, %v", resp, err)
	}
	if n := track.rpcs(); n != 0 {
		t.Fatalf("%d RPCs still counted in after they returned", n)
	}
	track.stop()
	ran := false
	_, err := call(h, func(context.Context, func(any) error) (any, error) { ran = true; return nil, nil }, nil)
	if status.Code(err) != codes.Unavailable || ran {
		t.Fatalf("RPC once stopping = %v (handler ran: %v), want Unavailable without running it", err, ran)
	}
}

// drained waits for every RPC and every connection, each counted once however often it is
// closed.
func TestTrackerDrained(t *testing.T) {
	track := newTracker()
	server, client := net.Pipe()
	defer client.Close()
	conn, _, err := track.handshaker(handshakerFunc(func(_ context.Context, c net.Conn) (net.Conn, any, error) {
		return c, nil, nil
	})).Handshake(context.Background(), server)
	if err != nil {
		t.Fatal(err)
	}
	if !track.begin() {
		t.Fatal("RPC refused before stopping")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if track.drained(ended) {
		t.Fatal("drained with an RPC and a connection open")
	}
	track.end()
	if track.drained(ended) {
		t.Fatal("drained with a connection open")
	}
	conn.Close()
	conn.Close()
	if n := track.connections(); n != 0 {
		t.Fatalf("%d connections after the only one closed twice", n)
	}
	if !track.drained(ctx(t)) {
		t.Fatal("not drained with nothing open")
	}
}

// The socket's file goes with the shim only while the path still names the socket it bound: a
// start for the same id may have put its own there.
func TestSocketRemovedOnlyIfStillOurs(t *testing.T) {
	listen := func(path string) *net.UnixListener {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	path := filepath.Join(t.TempDir(), "s.sock")
	ours := ownSocket(listen(path))
	ours.remove(discard)
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("own socket not removed: %v", err)
	}

	path = filepath.Join(t.TempDir(), "s.sock")
	old := ownSocket(listen(path))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	listen(path) // the next shim's
	old.remove(discard)
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("another shim's socket removed: %v", err)
	}
}

// The goroutine dump carries their count as an attribute of its own, and every stack.
func TestDumpStacks(t *testing.T) {
	var buf bytes.Buffer
	block := make(chan struct{})
	defer close(block)
	go func() { <-block }()
	dumpStacks(slog.New(slog.NewJSONHandler(&buf, nil)))
	var rec struct {
		Msg        string `json:"msg"`
		Goroutines int    `json:"goroutines"`
		Stacks     string `json:"stacks"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("dump is not one record: %v: %s", err, buf.String())
	}
	if rec.Msg != "goroutine dump" || rec.Goroutines < 2 {
		t.Fatalf("dump logged as %q with %d goroutines; want %q and at least the test's two", rec.Msg, rec.Goroutines, "goroutine dump")
	}
	if !strings.Contains(rec.Stacks, "TestDumpStacks.func") {
		t.Fatalf("dump without the test's blocked goroutine: %s", rec.Stacks)
	}
}
