// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	apitypes "github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

const runtimeName = "io.containerd.shimwalk.v2"

// cli runs the shim binary by hand, as containerd would, in a directory of its own that stands
// for the bundle.
type cli struct {
	t       *testing.T
	bin     string
	dir     string // the working directory of every invocation: the bundle
	sockets string // SHIMWALK_SOCKET_DIR
	// address is passed as -address. It is unique to the test, so every process started with
	// it can be found, and any left over is an error.
	address string
	// ownGroup starts each invocation in a process group of its own, as containerd does.
	ownGroup bool
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	dir := testkit.TempDir(t)
	c := &cli{
		t: t, bin: shimBinary(t), dir: dir,
		sockets: filepath.Join(dir, "s"),
		address: filepath.Join(dir, "containerd.sock"),
	}
	t.Cleanup(func() {
		for _, pid := range processesWithArg(c.address) {
			t.Errorf("process %d of the shim is left over", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return c
}

// args are the flags containerd passes, for task id, followed by the action (if any).
func (c *cli) args(id string, action ...string) []string {
	return append([]string{"-namespace", "test", "-address", c.address, "-publish-binary", "/bin/true", "-id", id}, action...)
}

// run runs the shim with stdin and the environment containerd sets, plus env. Variables of the
// test's own environment that the shim reads are dropped, so that only the case decides them.
func (c *cli) run(stdin []byte, env []string, args ...string) testkit.Result {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Dir = c.dir
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); {
		case name == "MAX_SHIM_VERSION", name == "TTRPC_ADDRESS", name == "GRPC_ADDRESS",
			name == "NAMESPACE", strings.HasPrefix(name, "SHIMWALK_"):
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env,
		"SHIMWALK_SOCKET_DIR="+c.sockets, "SHIMWALK_RUNC_ROOT="+testkit.RuncRoot(c.t),
		"TTRPC_ADDRESS="+filepath.Join(c.dir, "events.sock"), "GRPC_ADDRESS="+c.address, "NAMESPACE=test")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if c.ownGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	begin := time.Now()
	err := cmd.Run()
	r := testkit.Result{Stdout: stdout.String(), Stderr: stderr.String(), Took: time.Since(begin)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("run %s: %v", c.bin, err)
	}
	return r
}

// started checks that a start succeeded, registers the shutdown of the shim it started, and
// returns the parsed reply and the shim's pid.
func (c *cli) started(r testkit.Result) (driver.Bootstrap, int) {
	c.t.Helper()
	if r.Code != 0 || r.Stderr != "" {
		c.t.Fatalf("start: exit %d, stderr %q", r.Code, r.Stderr)
	}
	pid := testkit.ReadPid(c.t, filepath.Join(c.dir, bundle.ShimPidFile))
	b, err := driver.ParseStartReply([]byte(r.Stdout))
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		c.t.Fatalf("driver.ParseStartReply(%q): %v", r.Stdout, err)
	}
	c.t.Cleanup(func() { shutdownAt(c.t, b.Address, pid) })
	// Closed at once: a shim that stops waits for its clients to hang up.
	conn := c.dial(b)
	resp, err := conn.Task.Connect(rpcCtx(c.t, 5*time.Second), &taskapi.ConnectRequest{})
	conn.Close()
	if err != nil {
		c.t.Fatalf("Connect at %s: %v", b.Address, err)
	}
	if int(resp.ShimPid) != pid {
		c.t.Errorf("the address reaches shim %d, shim.pid says %d", resp.ShimPid, pid)
	}
	return b, pid
}

func (c *cli) dial(b driver.Bootstrap) *driver.Conn {
	c.t.Helper()
	conn, err := driver.Dial(rpcCtx(c.t, 5*time.Second), b.Address)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	return conn
}

// failed checks that an invocation failed as containerd needs it to: a non-zero exit, nothing
// on stdout (which containerd would parse), one line on stderr (which containerd puts in its
// error), and nothing created: no file in the bundle, no socket, no process.
func (c *cli) failed(what string, r testkit.Result) {
	c.t.Helper()
	if r.Code == 0 {
		c.t.Errorf("%s: exit 0, want a failure", what)
	}
	if r.Stdout != "" {
		c.t.Errorf("%s: stdout %q, want nothing", what, r.Stdout)
	}
	if strings.Count(r.Stderr, "\n") != 1 || !strings.HasSuffix(r.Stderr, "\n") || len(r.Stderr) > 1024 {
		c.t.Errorf("%s: stderr %q, want one short line", what, r.Stderr)
	}
	if entries, _ := os.ReadDir(c.dir); len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		c.t.Errorf("%s: left %v in the bundle", what, names)
	}
	if pids := processesWithArg(c.address); len(pids) > 0 {
		c.t.Errorf("%s: left processes %v", what, pids)
	}
}

// socketIn matches the address of a socket the shim made in dir, named by a sha256 in hex.
func socketIn(dir string) *regexp.Regexp {
	return regexp.MustCompile(`^unix://` + regexp.QuoteMeta(dir) + `/[0-9a-f]{64}$`)
}

func TestStartReplies(t *testing.T) {
	t.Parallel()

	t.Run("bare address for containerd 1.6", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		r := c.run(nil, nil, c.args("bare", "start")...)
		b, _ := c.started(r)
		if !socketIn(c.sockets).MatchString(r.Stdout) {
			t.Errorf("stdout %q, want a bare unix:// address in %s", r.Stdout, c.sockets)
		}
		if b != (driver.Bootstrap{Version: 2, Address: r.Stdout, Protocol: "ttrpc"}) {
			t.Errorf("ParseStartReply = %+v", b)
		}
		if addr, _ := os.ReadFile(filepath.Join(c.dir, bundle.AddressFile)); string(addr) != r.Stdout {
			t.Errorf("address file %q, want %q", addr, r.Stdout)
		}
	})

	for _, max := range []int{2, 3} {
		t.Run(fmt.Sprintf("JSON for MAX_SHIM_VERSION=%d", max), func(t *testing.T) {
			t.Parallel()
			c := newCLI(t)
			r := c.run(nil, []string{fmt.Sprintf("MAX_SHIM_VERSION=%d", max)}, c.args("json", "start")...)
			b, _ := c.started(r)
			var reply map[string]any
			if err := json.Unmarshal([]byte(r.Stdout), &reply); err != nil {
				t.Fatalf("stdout %q is not JSON: %v", r.Stdout, err)
			}
			addr, _ := reply["address"].(string)
			if reply["version"] != float64(max) || reply["protocol"] != "ttrpc" || len(reply) != 3 ||
				!socketIn(c.sockets).MatchString(addr) {
				t.Errorf("reply %s, want version %d, protocol ttrpc and an address in %s", r.Stdout, max, c.sockets)
			}
			if b != (driver.Bootstrap{Version: max, Address: addr, Protocol: "ttrpc"}) {
				t.Errorf("ParseStartReply = %+v", b)
			}
		})
	}

	t.Run("BootstrapResult for containerd 2.3", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		// containerd's socket_dir wins over the environment's.
		socketDir := filepath.Join(c.dir, "sd")
		params := &bootapi.BootstrapParams{
			InstanceID: "proto", Namespace: "test", SocketDir: proto.String(socketDir),
			ContainerdTtrpcAddress: "unix://" + filepath.Join(c.dir, "events.sock"),
			ContainerdGrpcAddress:  "unix://" + c.address,
			ContainerdVersion:      "v2.4.0",
		}
		if err := params.AddExtension(&options.Options{BinaryName: "runc"}); err != nil {
			t.Fatal(err)
		}
		r := c.run(marshal(t, params), []string{"MAX_SHIM_VERSION=3"}, c.args("proto", "start")...)
		b, _ := c.started(r)
		var result bootapi.BootstrapResult
		if err := proto.Unmarshal([]byte(r.Stdout), &result); err != nil {
			t.Fatalf("stdout %q is not a BootstrapResult: %v", r.Stdout, err)
		}
		if result.GetVersion() != 3 || result.GetProtocol() != "ttrpc" ||
			!socketIn(socketDir).MatchString(result.GetAddress()) {
			t.Errorf("BootstrapResult = %v, want version 3, ttrpc, a socket in %s", &result, socketDir)
		}
		if b != (driver.Bootstrap{Version: 3, Address: result.GetAddress(), Protocol: "ttrpc"}) {
			t.Errorf("ParseStartReply = %+v", b)
		}
		if _, err := os.Stat(c.sockets); !os.IsNotExist(err) {
			t.Errorf("SHIMWALK_SOCKET_DIR %s was used although socket_dir was given", c.sockets)
		}
	})
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestStartRefusesUnknownOptions: runtime options the shim does not understand are an
// operator's mistake to report, not to ignore, and a refused start leaves nothing behind.
func TestStartRefusesUnknownOptions(t *testing.T) {
	t.Parallel()
	cases := map[string][]byte{
		"an Any of another proto": marshal(t, mustAny(t, &apitypes.Mount{Type: "bind", Source: "/"})),
		"an Any of no known type": marshal(t, &anypb.Any{TypeUrl: "example.com/no.such.Options", Value: []byte{8, 1}}),
		"runc options that do not decode": marshal(t, &anypb.Any{
			TypeUrl: "containerd.runc.v1.Options", Value: []byte{0xff, 0xff, 0xff},
		}),
		"a runtime config with an unknown key": marshal(t, mustAny(t, &runtimeoptions.Options{
			ConfigBody: []byte("NoSuchKey = true\n"),
		})),
		"BootstrapParams with runc options that do not decode": marshal(t, &bootapi.BootstrapParams{
			InstanceID: "opts", Namespace: "test",
			Extensions: []*bootapi.Extension{{Value: &anypb.Any{
				TypeUrl: "type.googleapis.com/containerd.runc.v1.Options", Value: []byte{0xff, 0xff, 0xff},
			}}},
		}),
	}
	for name, stdin := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newCLI(t)
			c.failed("start", c.run(stdin, []string{"MAX_SHIM_VERSION=2"}, c.args("opts", "start")...))
			if _, err := os.Stat(c.sockets); !os.IsNotExist(err) {
				t.Errorf("the socket directory was created: %v", err)
			}
		})
	}
}

// TestStartIgnoresForeignExtensions: BootstrapParams extensions are "arbitrary structured data
// identified by type URL" (CRI, NRI, sandbox config). containerd's runc shim picks its options
// with FindExtension and ignores the rest; a section of another type is not runtime options.
func TestStartIgnoresForeignExtensions(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	params := &bootapi.BootstrapParams{InstanceID: "ext", Namespace: "test"}
	for _, m := range []proto.Message{&apitypes.Mount{Type: "bind"}, &options.Options{BinaryName: "runc"}} {
		if err := params.AddExtension(m); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := c.started(c.run(marshal(t, params), nil, c.args("ext", "start")...))
	if b.Version != 3 {
		t.Errorf("reply %+v, want a BootstrapResult of version 3", b)
	}
}

func TestVersionAndInfo(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	v := c.run(nil, nil, "-v")
	if v.Code != 0 || v.Stderr != "" || !strings.Contains(v.Stdout, runtimeName) ||
		!regexp.MustCompile(`(?m)^\s*Version:\s+\S+$`).MatchString(v.Stdout) {
		t.Errorf("-v: exit %d, stdout %q, stderr %q; want the version and %s", v.Code, v.Stdout, v.Stderr, runtimeName)
	}

	info := c.run(nil, nil, "-info")
	if info.Code != 0 || info.Stderr != "" {
		t.Fatalf("-info: exit %d, stderr %q", info.Code, info.Stderr)
	}
	var ri apitypes.RuntimeInfo
	if err := proto.Unmarshal([]byte(info.Stdout), &ri); err != nil {
		t.Fatalf("-info printed %q, not a RuntimeInfo: %v", info.Stdout, err)
	}
	if ri.GetName() != runtimeName || ri.GetVersion().GetVersion() == "" || ri.GetOptions() != nil {
		t.Errorf("RuntimeInfo = %v, want name %s, a version, no options", &ri, runtimeName)
	}

	// With options on stdin (as containerd 2.x sends them), they come back.
	opts := mustAny(t, &options.Options{BinaryName: "runc", Root: "/run/x"})
	withOpts := c.run(marshal(t, opts), nil, "-info")
	ri.Reset()
	if err := proto.Unmarshal([]byte(withOpts.Stdout), &ri); withOpts.Code != 0 || err != nil {
		t.Fatalf("-info with options: exit %d, %v, stderr %q", withOpts.Code, err, withOpts.Stderr)
	}
	if !proto.Equal(ri.GetOptions(), opts) {
		t.Errorf("RuntimeInfo options = %v, want %v", ri.GetOptions(), opts)
	}
	c.failed("-info with unknown options", c.run(marshal(t, mustAny(t, &apitypes.Mount{})), nil, "-info"))
}

// TestInfoReportsTheRuntimesFeatures: -info carries what `runc features` prints, in the Any
// containerd 2.x decodes, for the runtime the options name; a runtime without the command
// leaves the features out, and one that does not exist is an error, as with containerd's shim.
func TestInfoReportsTheRuntimesFeatures(t *testing.T) {
	t.Parallel()
	testkit.RequireCommand(t, "runc")
	c := newCLI(t)
	want, err := exec.Command("runc", "features").Output()
	if err != nil {
		t.Fatalf("runc features: %v", err)
	}
	var wantF features.Features
	if err := json.Unmarshal(want, &wantF); err != nil {
		t.Fatal(err)
	}
	info := func(opts *anypb.Any) (*apitypes.RuntimeInfo, testkit.Result) {
		var in []byte
		if opts != nil {
			in = marshal(t, opts)
		}
		r := c.run(in, nil, "-info")
		var ri apitypes.RuntimeInfo
		if r.Code == 0 {
			if err := proto.Unmarshal([]byte(r.Stdout), &ri); err != nil {
				t.Fatalf("-info printed %q, not a RuntimeInfo: %v", r.Stdout, err)
			}
		}
		return &ri, r
	}
	ri, r := info(nil)
	if r.Code != 0 {
		t.Fatalf("-info: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if got := ri.GetFeatures().GetTypeUrl(); got != "types.containerd.io/opencontainers/runtime-spec/1/features/Features" {
		t.Fatalf("features type %q", got)
	}
	var gotF features.Features
	if err := json.Unmarshal(ri.GetFeatures().GetValue(), &gotF); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotF, wantF) || gotF.OCIVersionMax == "" {
		t.Errorf("features %+v, want runc's %+v", gotF, wantF)
	}

	// A runtime that knows no "features" command.
	old := filepath.Join(testkit.TempDir(t), "old-runc")
	testkit.WriteExecutable(t, old, []byte("#!/bin/sh\n"+
		"[ \"$1\" = features ] && { echo 'unknown command features' >&2; exit 1; }\n"+
		"exec runc \"$@\"\n"))
	ri, r = info(mustAny(t, &options.Options{BinaryName: old}))
	if r.Code != 0 || ri.GetFeatures() != nil {
		t.Errorf("-info for a runtime without features: exit %d, features %v, stderr %q", r.Code, ri.GetFeatures(), r.Stderr)
	}
	_, r = info(mustAny(t, &options.Options{BinaryName: filepath.Join(testkit.TempDir(t), "no-such-runtime")}))
	c.failed("-info for a runtime that does not exist", r)
}

// TestBadCommandLines: what containerd would never send is refused with one line, before
// anything is created. (An argument cannot hold a NUL byte; ids with one reach the shim only
// through the Task API: see TestCreateRefusesBadRequests.)
func TestBadCommandLines(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	base := []string{"-namespace", "test", "-address", c.address, "-publish-binary", "/bin/true"}
	cases := map[string][]string{
		"missing -id":        append(base[:len(base):len(base)], "start"),
		"missing -namespace": {"-address", c.address, "-id", "x", "start"},
		"two actions":        c.args("x", "start", "delete"),
		"unknown action":     c.args("x", "frobnicate"),
		"unknown flag":       append(c.args("x"), "-frobnicate", "start"),
	}
	for _, id := range []string{"a/b", "..", "../x", "-", "a..b", strings.Repeat("a", 10<<10)} {
		for _, action := range []string{"start", "delete"} {
			cases[action+" with id "+shorten(id)] = c.args(id, action)
		}
	}
	cases["namespace with /"] = []string{"-namespace", "a/b", "-address", c.address, "-id", "x", "start"}
	for name, args := range cases {
		c.failed(name, c.run(nil, []string{"MAX_SHIM_VERSION=2"}, args...))
	}
	if _, err := os.Stat(c.sockets); !os.IsNotExist(err) {
		t.Errorf("the socket directory was created: %v", err)
	}
}

func shorten(s string) string {
	if len(s) > 16 {
		return fmt.Sprintf("%.8s... (%d bytes)", s, len(s))
	}
	return s
}

// TestStartLogsItsReply: with -debug, start tells containerd's log which generation it answered
// (the form of its reply and the Task API it offered) through the bundle's log FIFO, and its
// stdout stays the reply alone.
func TestStartLogsItsReply(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, form, api string
		stdin           func(t *testing.T, c *cli) []byte
		env             []string
	}{
		{"containerd 1.6", "address", "2", nil, nil},
		{"containerd 1.7 to 2.2", "json", "2", nil, []string{"MAX_SHIM_VERSION=2"}},
		{"containerd 2.3 and later", "protobuf", "3", func(t *testing.T, c *cli) []byte {
			return marshal(t, &bootapi.BootstrapParams{InstanceID: "logged", Namespace: "test"})
		}, []string{"MAX_SHIM_VERSION=2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCLI(t)
			// As containerd opens it before it runs start: read-write, so that no writer's
			// close ends the reading.
			path := filepath.Join(c.dir, "log")
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			log := os.NewFile(uintptr(fd), path)
			t.Cleanup(func() { log.Close() })
			var stdin []byte
			if tc.stdin != nil {
				stdin = tc.stdin(t, c)
			}
			r := c.run(stdin, tc.env, append([]string{"-debug"}, c.args("logged", "start")...)...)
			b, _ := c.started(r)
			// start wrote its line before its reply, and has exited: the line is in the FIFO.
			buf := make([]byte, 64<<10)
			n, err := log.Read(buf)
			if err != nil {
				t.Fatalf("read the log FIFO: %v", err)
			}
			want := regexp.MustCompile(`(?m)^time=\S+ level=DEBUG msg=start namespace=test id=logged reply=` + tc.form +
				` task_api=` + tc.api + ` address=` + regexp.QuoteMeta(b.Address) + `$`)
			if !want.Match(buf[:n]) {
				t.Errorf("log FIFO holds %q, want a line matching %s", buf[:n], want)
			}
		})
	}
}
