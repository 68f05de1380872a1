// SPDX-License-Identifier: Apache-2.0

package task_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/api/types/runc/options"
	tasktypes "github.com/containerd/containerd/api/types/task"
	runc "github.com/containerd/go-runc"
	"github.com/containerd/ttrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/shim/events"
	"github.com/shimwalk/shimwalk/final/shim/process"
	"github.com/shimwalk/shimwalk/final/shim/reaper"
	"github.com/shimwalk/shimwalk/final/shim/task"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// live is the container every input may address by name: it is running when each input
// arrives, so that the handlers behind the lookup are reached too.
const live = "live"

const fuzzNamespace = "fuzz"

// rpc is one Task method: a fresh request to decode the input into, and the call through a
// ttrpc client.
type rpc struct {
	name string
	req  func() proto.Message
	call func(context.Context, taskapi.TTRPCTaskService, proto.Message) error
}

func method[Req proto.Message, Resp any](name string, fn func(taskapi.TTRPCTaskService) func(context.Context, Req) (Resp, error)) rpc {
	return rpc{
		name: name,
		req: func() proto.Message {
			var zero Req
			return zero.ProtoReflect().New().Interface()
		},
		call: func(ctx context.Context, c taskapi.TTRPCTaskService, m proto.Message) error {
			_, err := fn(c)(ctx, m.(Req))
			return err
		},
	}
}

// rpcs are every method of the Task service; an input picks one by its first argument.
var rpcs = []rpc{
	method("State", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.StateRequest) (*taskapi.StateResponse, error) {
		return c.State
	}),
	method("Create", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.CreateTaskRequest) (*taskapi.CreateTaskResponse, error) {
		return c.Create
	}),
	method("Start", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.StartRequest) (*taskapi.StartResponse, error) {
		return c.Start
	}),
	method("Delete", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.DeleteRequest) (*taskapi.DeleteResponse, error) {
		return c.Delete
	}),
	method("Pids", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.PidsRequest) (*taskapi.PidsResponse, error) {
		return c.Pids
	}),
	method("Pause", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.PauseRequest) (*emptyResp, error) {
		return c.Pause
	}),
	method("Resume", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.ResumeRequest) (*emptyResp, error) {
		return c.Resume
	}),
	method("Checkpoint", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.CheckpointTaskRequest) (*emptyResp, error) {
		return c.Checkpoint
	}),
	method("Kill", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.KillRequest) (*emptyResp, error) {
		return c.Kill
	}),
	method("Exec", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.ExecProcessRequest) (*emptyResp, error) {
		return c.Exec
	}),
	method("ResizePty", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.ResizePtyRequest) (*emptyResp, error) {
		return c.ResizePty
	}),
	method("CloseIO", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.CloseIORequest) (*emptyResp, error) {
		return c.CloseIO
	}),
	method("Update", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.UpdateTaskRequest) (*emptyResp, error) {
		return c.Update
	}),
	method("Wait", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.WaitRequest) (*taskapi.WaitResponse, error) {
		return c.Wait
	}),
	method("Stats", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.StatsRequest) (*taskapi.StatsResponse, error) {
		return c.Stats
	}),
	method("Connect", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.ConnectRequest) (*taskapi.ConnectResponse, error) {
		return c.Connect
	}),
	method("Shutdown", func(c taskapi.TTRPCTaskService) func(context.Context, *taskapi.ShutdownRequest) (*emptyResp, error) {
		return c.Shutdown
	}),
}

// harness is a Task service behind a real ttrpc server, in this process, with runc's state,
// the bundles and every path an input may name inside one temporary directory.
type harness struct {
	dir     string
	runc    string // runc's state directory for the namespace
	bundles map[string]string
	paths   []string // stdio and checkpoint paths an input's paths are mapped onto
	// liveStdin is the live container's stdin FIFO; nobody writes to it.
	liveStdin string
	// own are the process's descriptors (the test framework's among them), which must outlive
	// every input: code that closes a descriptor twice closes whatever reused its number.
	own map[int][2]uint64
	// baseGoroutines and baseFDs are the counts after the first input, which takes in the
	// lazy allocations (runc's log, the cgroup handles); 0 until then.
	baseGoroutines, baseFDs int
	svc                     *task.Service
	client                  taskapi.TTRPCTaskService
	// made are the processes inputs created, removed after each input: [id, execID].
	made [][2]string
	// shutdowns counts calls of the service's Shutdown hook, which ends a real shim.
	shutdowns int
	mu        sync.Mutex
}

func newHarness(f *testing.F) *harness {
	testkit.RequireRoot(f)
	testkit.RequireCommand(f, "runc")
	rootfs := testkit.Rootfs(f)
	dir := testkit.TempDir(f)
	h := &harness{dir: dir, runc: filepath.Join(dir, "runc", fuzzNamespace), bundles: map[string]string{}}

	cgroups := "/shimwalk-test/" + filepath.Base(testkit.WorkDir(f)) + "/fuzz-" + filepath.Base(dir)
	spec := func(name string, args ...string) *specs.Spec {
		s := driver.DefaultSpec(fuzzNamespace, name, driver.SpecOptions{Args: args, Rootfs: rootfs, Readonly: true})
		s.Linux.CgroupsPath = cgroups + "/" + name
		return s
	}
	mkdir := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			f.Fatal(err)
		}
		return p
	}
	// live reads its stdin, which this process holds open: should the process be killed (the
	// fuzzing coordinator kills a worker it takes for hung), the container ends with it.
	for name, s := range map[string]*specs.Spec{"live": spec("live", "sh", "-c", "read x"), "spare": spec("spare", "sleep", "3600")} {
		b := mkdir(name)
		if err := driver.WriteSpec(b, s); err != nil {
			f.Fatal(err)
		}
		h.bundles[name] = b
	}
	h.bundles["noconfig"] = mkdir("noconfig")
	h.bundles["badjson"] = mkdir("badjson")
	if err := os.WriteFile(filepath.Join(h.bundles["badjson"], bundle.ConfigFile), []byte(`{"ociVersion": `), 0o644); err != nil {
		f.Fatal(err)
	}
	h.bundles["file"] = filepath.Join(dir, "file")
	h.bundles["link"] = filepath.Join(dir, "link")
	h.bundles["missing"] = filepath.Join(dir, "missing")
	if err := os.WriteFile(h.bundles["file"], []byte("not a bundle"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(h.bundles["spare"], h.bundles["link"]); err != nil {
		f.Fatal(err)
	}
	// stdio targets of every kind: FIFO, regular file, directory, symlink, nothing.
	ioDir := mkdir("io")
	fifo := filepath.Join(ioDir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		f.Fatal(err)
	}
	regular := filepath.Join(ioDir, "regular")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		f.Fatal(err)
	}
	link := filepath.Join(ioDir, "link")
	if err := os.Symlink(regular, link); err != nil {
		f.Fatal(err)
	}
	h.paths = []string{fifo, regular, link, ioDir, filepath.Join(ioDir, "missing")}
	// Its own: inputs may close the FIFOs they are given, which ends their readers' input.
	h.liveStdin = filepath.Join(dir, "live-stdin")
	if err := syscall.Mkfifo(h.liveStdin, 0o600); err != nil {
		f.Fatal(err)
	}

	// This process stands in for the shim: it adopts and reaps the containers, and routes
	// runc's own exits to the runc calls that wait for them.
	if err := reaper.SetSubreaper(); err != nil {
		f.Fatal(err)
	}
	r := reaper.New()
	runc.Monitor = r
	ctx, stop := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	// The inputs would flood a log; what matters is checked on the replies.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Nobody listens at the events address: events queue, bounded, and are dropped.
	pub := events.NewPublisher(filepath.Join(dir, "no-events.sock"), fuzzNamespace, log)
	h.svc = task.New(task.Config{
		Namespace: fuzzNamespace, Log: log, Events: pub, Reaper: r,
		// An input's runtime options cannot name another root.
		RuncRoot: filepath.Join(h.dir, "runc"),
		Shutdown: func() { h.mu.Lock(); h.shutdowns++; h.mu.Unlock() },
	})
	exits := r.Subscribe()
	loops.Add(3)
	go func() { defer loops.Done(); pub.Run() }() // ends with pub.Close
	go func() { defer loops.Done(); r.Run(ctx) }()
	go func() { defer loops.Done(); h.svc.HandleExits(ctx, exits) }()

	srv, err := ttrpc.NewServer(ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser()))
	if err != nil {
		f.Fatal(err)
	}
	taskapi.RegisterTTRPCTaskService(srv, h.svc)
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		f.Fatal(err)
	}
	loops.Add(1)
	go func() { defer loops.Done(); _ = srv.Serve(ctx, ln) }()
	conn, err := net.Dial("unix", filepath.Join(dir, "s"))
	if err != nil {
		f.Fatal(err)
	}
	client := ttrpc.NewClient(conn)
	h.client = taskapi.NewTTRPCTaskClient(client)

	f.Cleanup(func() {
		h.removeMade(f)
		h.stopLive(f)
		client.Close()
		srv.Close()
		stop()
		r.Unsubscribe(exits)
		closing, cancelClose := context.WithTimeout(context.Background(), time.Second)
		pub.Close(closing) // gives up on the events nobody receives
		cancelClose()
		loops.Wait()
		if left := h.runcState(); len(left) > 0 {
			f.Errorf("runc state left: %v", left)
		}
	})
	// Taken before the live container has stdio, which is remade with it.
	h.own = fdIdentities()
	h.ensureLive(f)
	return h
}

// ensureLive makes the live container run, whatever the last input did to it.
func (h *harness) ensureLive(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := h.svc.State(ctx, &taskapi.StateRequest{ID: live})
	if err == nil && st.Status == tasktypes.Status_RUNNING {
		return
	}
	if err == nil && st.Status == tasktypes.Status_PAUSED {
		if _, err := h.svc.Resume(ctx, &taskapi.ResumeRequest{ID: live}); err != nil {
			t.Fatalf("resume %s: %v", live, err)
		}
		return
	}
	if err == nil {
		h.stopLive(t)
	}
	if _, err := h.svc.Create(ctx, &taskapi.CreateTaskRequest{ID: live, Bundle: h.bundles["live"], Stdin: h.liveStdin}); err != nil {
		t.Fatalf("create %s: %v", live, err)
	}
	if _, err := h.svc.Start(ctx, &taskapi.StartRequest{ID: live}); err != nil {
		t.Fatalf("start %s: %v", live, err)
	}
}

// stopLive kills and deletes the live container, if there is one.
func (h *harness) stopLive(t testing.TB) {
	t.Helper()
	h.remove(t, live, "")
}

// remove kills, waits for and deletes one process an input may have made.
func (h *harness) remove(t testing.TB, id, execID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := h.svc.State(ctx, &taskapi.StateRequest{ID: id, ExecID: execID})
	if err != nil {
		return // gone already, or never made
	}
	if st.Status == tasktypes.Status_PAUSED {
		_, _ = h.svc.Resume(ctx, &taskapi.ResumeRequest{ID: id})
	}
	if st.Status != tasktypes.Status_CREATED || execID == "" {
		_, _ = h.svc.Kill(ctx, &taskapi.KillRequest{ID: id, ExecID: execID, Signal: uint32(syscall.SIGKILL), All: execID == ""})
	}
	if st.Status != tasktypes.Status_CREATED {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		_, werr := h.svc.Wait(wctx, &taskapi.WaitRequest{ID: id, ExecID: execID})
		wcancel()
		if werr != nil {
			t.Fatalf("%s/%s never exited after SIGKILL: %v", id, execID, werr)
		}
	}
	if _, err := h.svc.Delete(ctx, &taskapi.DeleteRequest{ID: id, ExecID: execID}); err != nil {
		t.Fatalf("delete %s/%s: %v", id, execID, err)
	}
}

func (h *harness) removeMade(t testing.TB) {
	t.Helper()
	// Execs first: a container with running execs cannot be deleted.
	slices.SortStableFunc(h.made, func(a, b [2]string) int { return len(b[1]) - len(a[1]) })
	for _, m := range h.made {
		if m[0] == live && m[1] == "" {
			continue
		}
		h.remove(t, m[0], m[1])
	}
	h.made = nil
}

// runcState lists the containers runc keeps state for.
func (h *harness) runcState() []string {
	entries, _ := os.ReadDir(h.runc)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// hostPath maps a path from an input onto the harness's own paths, so that no input reaches
// the host's files; which one it becomes depends on the input alone.
func (h *harness) hostPath(p string) string {
	if p == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(p))
	if u, err := url.Parse(p); err == nil {
		switch u.Scheme {
		case "binary", "binary-v2":
			return u.Scheme + ":///bin/false?" + u.RawQuery // a logger that fails at once
		case "file":
			return "file://" + filepath.Join(h.dir, "io", "out-"+hex.EncodeToString(sum[:4]))
		}
	}
	if !filepath.IsAbs(p) {
		return p // refused as it is
	}
	return h.paths[int(sum[0])%len(h.paths)]
}

// bundle maps a bundle path from an input onto one of the harness's bundles.
func (h *harness) bundle(p string) string {
	if p == "" || !filepath.IsAbs(p) {
		return p
	}
	// Not live's: two containers in one bundle share its cgroup, which containerd never asks for.
	names := []string{"spare", "noconfig", "badjson", "file", "link", "missing"}
	sum := sha256.Sum256([]byte(p))
	return h.bundles[names[int(sum[0])%len(names)]]
}

// sanitize rewrites the fields of m that name host resources (paths, binaries, device access),
// keeping everything else as the input made it.
func (h *harness) sanitize(m proto.Message) {
	switch r := m.(type) {
	case *taskapi.CreateTaskRequest:
		r.Bundle = h.bundle(r.Bundle)
		r.Stdin, r.Stdout, r.Stderr = h.hostPath(r.Stdin), h.hostPath(r.Stdout), h.hostPath(r.Stderr)
		if r.Checkpoint != "" {
			r.Checkpoint = filepath.Join(h.dir, "checkpoint")
		}
		if r.ParentCheckpoint != "" {
			r.ParentCheckpoint = filepath.Join(h.dir, "parent")
		}
		var mounts []*types.Mount
		for _, mnt := range r.Rootfs {
			// Only file systems that live in memory: a bind or overlay could name host paths.
			if mnt.GetType() == "tmpfs" {
				mounts = append(mounts, &types.Mount{Type: "tmpfs", Source: "tmpfs", Options: mnt.GetOptions()})
			}
		}
		r.Rootfs = mounts
		r.Options = scrubOptions(r.Options)
	case *taskapi.ExecProcessRequest:
		r.Stdin, r.Stdout, r.Stderr = h.hostPath(r.Stdin), h.hostPath(r.Stdout), h.hostPath(r.Stderr)
		if r.Spec != nil {
			var p specs.Process
			if json.Unmarshal(r.Spec.GetValue(), &p) == nil {
				p.Capabilities, p.NoNewPrivileges = nil, true
				if data, err := json.Marshal(p); err == nil {
					r.Spec.Value = data
				}
			}
		}
	case *taskapi.CheckpointTaskRequest:
		if r.Path != "" {
			r.Path = filepath.Join(h.dir, "checkpoint")
		}
		if r.Options != nil && r.Options.MessageIs(&options.CheckpointOptions{}) {
			var o options.CheckpointOptions
			if r.Options.UnmarshalTo(&o) == nil {
				o.ImagePath, o.WorkPath = filepath.Join(h.dir, "checkpoint"), ""
				if a, err := anypb.New(&o); err == nil {
					a.TypeUrl = r.Options.TypeUrl
					r.Options = a
				}
			}
		}
	case *taskapi.UpdateTaskRequest:
		if r.Resources != nil {
			var res specs.LinuxResources
			if json.Unmarshal(r.Resources.GetValue(), &res) == nil {
				res.Devices = nil
				if data, err := json.Marshal(res); err == nil {
					r.Resources.Value = data
				}
			}
		}
	}
}

// scrubOptions keeps runtime options that would be refused as they are, and clears from the
// others what names a binary, a state root or a cgroup.
func scrubOptions(a *anypb.Any) *anypb.Any {
	if !process.IsOptions(a) {
		return a
	}
	o, _, err := process.ParseOptions(a)
	if err != nil {
		return a
	}
	scrubbed, err := anypb.New(&options.Options{
		NoPivotRoot: o.NoPivotRoot, NoNewKeyring: o.NoNewKeyring,
		IoUid: uint32(o.IoUID), IoGid: uint32(o.IoGID),
	})
	if err != nil {
		return a
	}
	return scrubbed
}

// allowed are the codes a refusal may carry: errdefs' classes, and Unknown for what runc
// itself reported (a message that begins "runc ").
var allowed = []codes.Code{
	codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition,
	codes.Unknown,
}

func openFDs() int {
	entries, _ := os.ReadDir("/proc/self/fd")
	return len(entries)
}

// fdIdentities maps each open fd to the file it is open on, to tell a descriptor closed and
// its number reused from one left alone.
func fdIdentities() map[int][2]uint64 {
	ids := map[int][2]uint64{}
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) == nil {
			ids[fd] = [2]uint64{st.Dev, st.Ino}
		}
	}
	return ids
}

// fdTargets names what the process's fds are open on, for the report of a leak.
func fdTargets() []string {
	entries, _ := os.ReadDir("/proc/self/fd")
	var targets []string
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
			targets = append(targets, target)
		}
	}
	return targets
}

// FuzzTaskService decodes each input into the request of one Task method, sends it through a
// ttrpc client to the service, and checks the answer: a reply or a status of a known class,
// no panic, the live container unharmed unless the input addressed it, and after the
// processes it made are removed, nothing left: no runc state, no mount, no goroutine, no fd.
func FuzzTaskService(f *testing.F) {
	h := newHarness(f)
	add := func(name string, m proto.Message) {
		i := slices.IndexFunc(rpcs, func(r rpc) bool { return r.name == name })
		data, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), data)
	}
	spec := func(args ...string) *anypb.Any {
		data, _ := json.Marshal(specs.Process{Args: args, Cwd: "/"})
		return &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process", Value: data}
	}
	runcOpts, _ := anypb.New(&options.Options{BinaryName: "/bin/false", Root: "/elsewhere"})
	for _, b := range []string{"/spare", "/b", "/c", "/d", "/e", "/f", "relative"} {
		add("Create", &taskapi.CreateTaskRequest{ID: "made", Bundle: b})
	}
	add("Create", &taskapi.CreateTaskRequest{ID: live, Bundle: "/x"})
	add("Create", &taskapi.CreateTaskRequest{ID: "opts", Bundle: "/spare", Options: runcOpts})
	add("Create", &taskapi.CreateTaskRequest{ID: "io", Bundle: "/spare", Stdout: "/a", Stderr: "/b", Stdin: "/c"})
	// Stdin alone (/p8 maps onto the FIFO): runc create once waited for the container's exit.
	add("Create", &taskapi.CreateTaskRequest{ID: "io", Bundle: "/p2", Stdin: "/p8"})
	add("Create", &taskapi.CreateTaskRequest{ID: "file", Bundle: "/spare", Stdout: "file:///x"})
	add("Create", &taskapi.CreateTaskRequest{ID: "tty", Bundle: "/spare", Terminal: true, Stdout: "/a"})
	add("Create", &taskapi.CreateTaskRequest{ID: "mnt", Bundle: "/spare", Rootfs: []*types.Mount{{Type: "tmpfs", Options: []string{"size=1m"}}}})
	add("Create", &taskapi.CreateTaskRequest{ID: "../x", Bundle: "/spare"})
	add("Start", &taskapi.StartRequest{ID: live})
	add("Start", &taskapi.StartRequest{ID: live, ExecID: "nosuch"})
	add("Delete", &taskapi.DeleteRequest{ID: live})
	add("Kill", &taskapi.KillRequest{ID: live, Signal: 9, All: true})
	add("Kill", &taskapi.KillRequest{ID: live, Signal: 99999})
	add("Kill", &taskapi.KillRequest{ID: live})
	add("Exec", &taskapi.ExecProcessRequest{ID: live, ExecID: "e", Spec: spec("/bin/true")})
	add("Exec", &taskapi.ExecProcessRequest{ID: live, ExecID: "e", Spec: spec("/bin/sh", "-c", "exit 3"), Stdout: "/a"})
	add("Exec", &taskapi.ExecProcessRequest{ID: live, ExecID: "e", Spec: &anypb.Any{Value: []byte("{")}})
	add("Exec", &taskapi.ExecProcessRequest{ID: live, ExecID: "e/..", Spec: spec("/bin/true")})
	add("State", &taskapi.StateRequest{ID: live})
	add("State", &taskapi.StateRequest{ID: "nul\x00"})
	add("Pids", &taskapi.PidsRequest{ID: live})
	add("Pause", &taskapi.PauseRequest{ID: live})
	add("Resume", &taskapi.ResumeRequest{ID: live})
	add("Checkpoint", &taskapi.CheckpointTaskRequest{ID: live, Path: "/ckpt"})
	add("Checkpoint", &taskapi.CheckpointTaskRequest{ID: live})
	add("ResizePty", &taskapi.ResizePtyRequest{ID: live, Width: 80, Height: 24})
	add("CloseIO", &taskapi.CloseIORequest{ID: live, Stdin: true})
	add("Update", &taskapi.UpdateTaskRequest{ID: live, Resources: &anypb.Any{Value: []byte(`{"pids":{"limit":100}}`)}})
	add("Update", &taskapi.UpdateTaskRequest{ID: live, Resources: &anypb.Any{Value: []byte(`{"memory":{"limit":-5}}`)}})
	add("Update", &taskapi.UpdateTaskRequest{ID: live, Resources: &anypb.Any{Value: []byte(`[]`)}})
	add("Wait", &taskapi.WaitRequest{ID: live})
	add("Stats", &taskapi.StatsRequest{ID: live})
	add("Connect", &taskapi.ConnectRequest{ID: live})
	add("Shutdown", &taskapi.ShutdownRequest{ID: live, Now: true})

	f.Fuzz(func(t *testing.T, which uint8, payload []byte) {
		r := rpcs[int(which)%len(rpcs)]
		req := r.req()
		if proto.Unmarshal(payload, req) != nil {
			return // the server's decoding is TestIllegalTransitions' (shimtest) to check
		}
		h.sanitize(req)
		h.ensureLive(t)
		h.send(t, r, req)
		h.settle(t, fmt.Sprintf("%s %v", r.name, req))
	})
}

// FuzzTaskSequence is FuzzTaskService for a few calls in a row, so that a process an input
// made can be started, signalled, paused or deleted by the next call of the same input. Each
// call is a method byte, a length byte and that many bytes of request.
func FuzzTaskSequence(f *testing.F) {
	h := newHarness(f)
	seq := func(calls ...proto.Message) []byte {
		var data []byte
		for _, m := range calls {
			name := strings.TrimSuffix(strings.TrimSuffix(string(m.ProtoReflect().Descriptor().Name()), "Request"), "Task")
			if name == "ExecProcess" {
				name = "Exec"
			}
			i := slices.IndexFunc(rpcs, func(r rpc) bool { return r.name == name })
			if i < 0 {
				f.Fatalf("no method for %s", name)
			}
			body, err := proto.Marshal(m)
			if err != nil || len(body) > 255 {
				f.Fatalf("seed %v: %d bytes, %v", m, len(body), err)
			}
			data = append(append(data, byte(i), byte(len(body))), body...)
		}
		return data
	}
	spec := func(args ...string) *anypb.Any {
		data, _ := json.Marshal(specs.Process{Args: args, Cwd: "/"})
		return &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process", Value: data}
	}
	f.Add(seq(
		&taskapi.CreateTaskRequest{ID: "c", Bundle: "/spare"}, &taskapi.StartRequest{ID: "c"},
		&taskapi.PauseRequest{ID: "c"}, &taskapi.KillRequest{ID: "c", Signal: 9, All: true},
		&taskapi.ResumeRequest{ID: "c"}, &taskapi.WaitRequest{ID: "c"}, &taskapi.DeleteRequest{ID: "c"},
	))
	f.Add(seq(
		&taskapi.CreateTaskRequest{ID: "c", Bundle: "/spare"}, &taskapi.DeleteRequest{ID: "c"},
		&taskapi.CreateTaskRequest{ID: "c", Bundle: "/spare"}, &taskapi.StartRequest{ID: "c"},
	))
	f.Add(seq(
		&taskapi.ExecProcessRequest{ID: live, ExecID: "e", Spec: spec("sleep", "5")},
		&taskapi.StartRequest{ID: live, ExecID: "e"}, &taskapi.PidsRequest{ID: live},
		&taskapi.KillRequest{ID: live, ExecID: "e", Signal: 15}, &taskapi.WaitRequest{ID: live, ExecID: "e"},
		&taskapi.DeleteRequest{ID: live, ExecID: "e"}, &taskapi.DeleteRequest{ID: live, ExecID: "e"},
	))
	f.Add(seq(
		&taskapi.ExecProcessRequest{ID: live, ExecID: "e", Spec: spec("true")},
		&taskapi.StartRequest{ID: live, ExecID: "e"}, &taskapi.StartRequest{ID: live, ExecID: "e"},
		&taskapi.KillRequest{ID: live, Signal: 9}, &taskapi.DeleteRequest{ID: live},
		&taskapi.ShutdownRequest{},
	))
	f.Add(seq(
		&taskapi.PauseRequest{ID: live}, &taskapi.ExecProcessRequest{ID: live, ExecID: "p", Spec: spec("true")},
		&taskapi.UpdateTaskRequest{ID: live, Resources: &anypb.Any{Value: []byte(`{"cpu":{"shares":512}}`)}},
		&taskapi.StatsRequest{ID: live}, &taskapi.ResumeRequest{ID: live},
	))
	// Closing stdin twice: the second once failed with "file already closed".
	f.Add(seq(&taskapi.CloseIORequest{ID: live, Stdin: true}, &taskapi.CloseIORequest{ID: live, Stdin: true}))
	f.Fuzz(func(t *testing.T, data []byte) {
		h.ensureLive(t)
		var done []string
		for calls := 0; len(data) >= 2 && calls < 8; calls++ {
			r := rpcs[int(data[0])%len(rpcs)]
			n := min(int(data[1]), len(data)-2)
			body := data[2 : 2+n]
			data = data[2+n:]
			req := r.req()
			if proto.Unmarshal(body, req) != nil {
				continue
			}
			h.sanitize(req)
			h.send(t, r, req)
			done = append(done, fmt.Sprintf("%s %v", r.name, req))
		}
		h.settle(t, strings.Join(done, "; "))
	})
}

// send makes one call and checks its answer: a reply or an allowed code, within its time, and
// the live container untouched unless the request named it.
func (h *harness) send(t *testing.T, r rpc, req proto.Message) {
	t.Helper()
	livePid := func() uint32 {
		st, err := h.svc.State(context.Background(), &taskapi.StateRequest{ID: live})
		if err != nil {
			return 0
		}
		return st.Pid
	}
	before := livePid()
	h.mu.Lock()
	shutdowns := h.shutdowns
	h.mu.Unlock()
	timeout := 30 * time.Second
	if r.name == "Wait" {
		timeout = 200 * time.Millisecond // a live process does not exit for Wait
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	err := r.call(ctx, h.client, req)
	expired := ctx.Err() != nil
	cancel()
	code := driver.Code(err)
	switch {
	case r.name == "Wait" && (expired || code == codes.DeadlineExceeded):
		// The server's copy of the deadline may expire first.
	case expired:
		t.Fatalf("%s %v: no answer in %v", r.name, req, timeout)
	case !slices.Contains(allowed, code):
		t.Fatalf("%s %v: %v (%v), want a reply or one of %v", r.name, req, code, err, allowed)
	case code == codes.Unknown && !strings.HasPrefix(driver.Message(err), "runc "):
		t.Fatalf("%s %v: %v; Unknown is for runc's own failures, the request's fault is InvalidArgument", r.name, req, err)
	case err != nil && (driver.Message(err) == "" || len(driver.Message(err)) > 64<<10):
		t.Fatalf("%s %v: a %d-byte message", r.name, req, len(driver.Message(err)))
	}
	if err == nil {
		switch m := req.(type) {
		case *taskapi.CreateTaskRequest:
			h.made = append(h.made, [2]string{m.ID, ""})
		case *taskapi.ExecProcessRequest:
			h.made = append(h.made, [2]string{m.ID, m.ExecID})
		}
	}
	// Only a request that names the live container may change it.
	if id := idOf(req); id != live && before != 0 {
		if after := livePid(); after != before {
			t.Fatalf("%s of %q changed the live container: pid %d, then %d", r.name, id, before, after)
		}
	}
	h.mu.Lock()
	ended := h.shutdowns > shutdowns
	h.mu.Unlock()
	if ended && h.svc.Containers() > 0 {
		t.Fatalf("%s %v: Shutdown ended the shim with %d containers", r.name, req, h.svc.Containers())
	}
}

// settle removes what the input made and checks that nothing is left: no runc state but the
// live container's, no mount, no descriptor of the process closed under it, and, once the
// first input has set the floor, no goroutine or descriptor more than a few above it.
func (h *harness) settle(t *testing.T, what string) {
	t.Helper()
	h.removeMade(t)
	h.ensureLive(t)
	if left := h.runcState(); !slices.Equal(left, []string{live}) {
		t.Fatalf("%s: runc state %v, want only %s", what, left, live)
	}
	if m, _ := driver.MountsUnder(h.dir); len(m) > 0 {
		t.Fatalf("%s: mounts left: %v", what, m)
	}
	now := fdIdentities()
	for fd, id := range h.own {
		if now[fd] != id {
			t.Fatalf("%s: fd %d was closed under its owner (now %v, was %v)", what, fd, now[fd], id)
		}
	}
	if h.baseGoroutines == 0 {
		h.baseGoroutines, h.baseFDs = runtime.NumGoroutine(), openFDs()
		return
	}
	// Output copies and exits settle shortly after the processes are gone.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > h.baseGoroutines+8 || openFDs() > h.baseFDs+8 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d goroutines and %d fds, from %d and %d; fds on %v", what,
				runtime.NumGoroutine(), openFDs(), h.baseGoroutines, h.baseFDs, fdTargets())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// idOf is the task id a request names.
func idOf(m proto.Message) string {
	if r, ok := m.(interface{ GetID() string }); ok {
		return r.GetID()
	}
	return ""
}

// emptyResp is the reply of the methods that return nothing.
type emptyResp = emptypb.Empty
