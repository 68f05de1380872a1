// SPDX-License-Identifier: Apache-2.0

// The narrated walkthrough: one container through the whole life cycle, as containerd v2.4
// core/runtime/v2 (shim_manager.go Start, shim.go, task_manager.go) drives it, shown with the
// real values of the run. Unlike containerd it stops where the shim's step stops.

package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/ttrpc"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// finalStep is the step number the demo gives the final shim: it has every mechanism.
const finalStep = 99

// demoWidth is the width the prose is wrapped to: an 80-column terminal.
const demoWidth = 80

// demoTimeout bounds each wait of the demo for something the shim or the container does.
const demoTimeout = 10 * time.Second

// demoScript is the container's command: it says hello, then runs until SIGTERM, which it
// answers with exit status 3. sh is PID 1 of its namespace, so without the trap it would
// ignore TERM.
var demoScript = []string{"sh", "-c", `trap "exit 3" TERM; echo hello from the container; while :; do sleep 0.1; done`}

var demoStepShim = regexp.MustCompile(`^containerd-shim-step([0-9][0-9])-v2$`)

func demoCommand(g *globals) *cobra.Command {
	var step string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "demo [--step NN] [--json]",
		Short: "Run one container through its whole life cycle and narrate what happens",
		Long: `demo plays containerd towards a shim for one container and explains each phase
as it happens, with the values of this run: the start action's command line and
reply, the socket and its mode, the process tree of the shim and of the
container, each RPC with its latency, each event, the exit status and the
cleanup. It stops where the shim's step stops (step 01 has no RPC, step 02 no
Create, steps 03 and 04 no Wait) and ends with the run as a Mermaid sequence
diagram.

The shim is the final one beside shimctl, or with --step NN the step's shim
beside shimctl (--shim PATH picks any). Everything lives in a private temporary
directory (state, shim sockets, runc root), and everything the demo started is
stopped and removed at the end, also when it fails or is interrupted.

With --json every line is one JSON object: the narration, the trace records
and the diagram.`,
		Example: `  shimctl demo
  shimctl demo --step 03
  shimctl demo --step 05 --json | jq -c 'select(.kind == "rpc")'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			shim, stepNo, err := demoShim(g, step)
			if err != nil {
				return err
			}
			m := &demo{out: cmd.OutOrStdout(), json: asJSON, step: stepNo, shim: shim, began: time.Now()}
			if g.tracing != nil {
				// --trace: the demo's records go to the file too.
				m.traceFile = g.tracing.file
			}
			return m.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&step, "step", "", "run the shim of step NN (01..06) beside shimctl")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line instead of prose")
	return cmd
}

// demoShim resolves the shim the demo runs and the step it belongs to.
func demoShim(g *globals, step string) (string, int, error) {
	var shim string
	switch {
	case step != "" && (g.shim != "" || g.runtime != ""):
		return "", 0, usageError{errors.New("demo: --step does not go with --shim or --runtime")}
	case step != "":
		n, err := strconv.Atoi(step)
		if err != nil || n < 1 || n > 6 {
			return "", 0, usageError{fmt.Errorf("demo: --step wants 01..06, got %q", step)}
		}
		self, err := os.Executable()
		if err != nil {
			return "", 0, fmt.Errorf("demo: find shimctl: %w", err)
		}
		shim = filepath.Join(filepath.Dir(self), fmt.Sprintf("containerd-shim-step%02d-v2", n))
	default:
		p, err := g.shimPath()
		if err != nil {
			return "", 0, err
		}
		shim = p
	}
	if _, err := os.Stat(shim); err != nil {
		return "", 0, fmt.Errorf("demo: no shim at %s (make build puts it there): %w", shim, err)
	}
	n := finalStep
	if m := demoStepShim.FindStringSubmatch(filepath.Base(shim)); m != nil {
		n, _ = strconv.Atoi(m[1])
	}
	return shim, n, nil
}

// demo is one run of the walkthrough.
type demo struct {
	out   io.Writer
	json  bool
	step  int
	shim  string
	began time.Time

	outMu sync.Mutex // serialises output: events and container output arrive concurrently
	phase string     // guarded by outMu

	dir, runcRoot string
	id            string
	d             *driver.Driver
	trace         *driver.Trace
	traceFile     *driver.TraceFile // of --trace, or nil
	events        *driver.EventServer
	stopEvents    func() // ends the goroutine that reads events
	fifos         *driver.FIFOs
	attached      *driver.Attached
	conn          *driver.Conn
	shimPid       int
	created       bool // a Create reached the shim: there may be a container
	greeted       chan struct{}
}

// ---- output ----

// emit writes one item: in prose, text (already laid out); in JSON, an object of kind, the
// phase, text when not empty, and fields.
func (m *demo) emit(kind, text string, fields map[string]any) {
	m.outMu.Lock()
	defer m.outMu.Unlock()
	if kind == "phase" {
		m.phase = fields["phase"].(string)
	}
	if !m.json {
		fmt.Fprintln(m.out, text)
		return
	}
	obj := map[string]any{"kind": kind, "phase": m.phase, "t": time.Since(m.began).Milliseconds()}
	if text != "" {
		obj["text"] = strings.TrimSpace(text)
	}
	for k, v := range fields {
		obj[k] = v
	}
	data, err := json.Marshal(obj)
	if err != nil {
		data, _ = json.Marshal(map[string]any{"kind": "error", "text": err.Error()})
	}
	fmt.Fprintln(m.out, string(data))
}

// section starts a phase.
func (m *demo) section(phase, title string) {
	m.emit("phase", "\n== "+title, map[string]any{"phase": phase, "title": title})
}

// say narrates, wrapped to the terminal's width.
func (m *demo) say(format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if m.json {
		m.emit("say", text, nil)
		return
	}
	m.emit("say", demoWrap(text, "   ", "   "), nil)
}

// fact shows a value of this run: prose "   name: value", JSON {"kind":"fact","name","value"}.
func (m *demo) fact(name string, value any) {
	m.emit("fact", demoWrap(fmt.Sprintf("%s: %v", name, value), "   ", "       "), map[string]any{"name": name, "value": value})
}

// demoWrap lays s out in lines of at most demoWidth columns, breaking at spaces; a word longer
// than a line is cut.
func demoWrap(s, first, rest string) string {
	var lines []string
	line := first
	for _, w := range strings.Fields(s) {
		for len([]rune(rest+w)) > demoWidth {
			r := []rune(w)
			cut := demoWidth - len([]rune(rest))
			if line != first && line != rest {
				lines = append(lines, line)
			}
			lines = append(lines, rest+string(r[:cut]))
			w, line = string(r[cut:]), rest
		}
		switch {
		case line == first || line == rest:
			line += w
		case len([]rune(line))+1+len([]rune(w)) > demoWidth:
			lines = append(lines, line)
			line = rest + w
		default:
			line += " " + w
		}
	}
	return strings.Join(append(lines, line), "\n")
}

// record narrates a trace record as it is added.
func (m *demo) record(r driver.Record) {
	if r.Kind == driver.KindPoint {
		return // the demo tells the mechanisms in its own words, each where it shows them
	}
	fields := map[string]any{}
	data, _ := json.Marshal(r)
	_ = json.Unmarshal(data, &fields)
	delete(fields, "kind")
	fields["record"] = r.Kind
	var text string
	switch r.Kind {
	case driver.KindRPC:
		answer := "ok"
		switch {
		case r.Error == ttrpc.ErrClosed.Error():
			// A shim may exit before its reply to Shutdown leaves: that is a shutdown too.
			answer = "closed"
		case r.Code != codes.OK.String():
			answer = r.Code
		}
		text = fmt.Sprintf("   -> %-11s %-14s %s", r.Name, answer, demoLatency(r.Duration))
	case driver.KindEvent:
		text = fmt.Sprintf("   <= event %s container=%s pid=%d", r.Name, r.Container, r.Pid)
	case driver.KindExit:
		text = fmt.Sprintf("   <= exit of %s: status %d (from %s)", r.Container, *r.ExitStatus, r.Name)
	case driver.KindExec:
		answer := "ok"
		if r.Error != "" {
			answer = "failed"
		}
		text = fmt.Sprintf("   -> %-11s %-14s %s", "exec "+r.Name, answer, demoLatency(r.Duration))
	}
	m.emit(r.Kind, text, fields)
}

func demoLatency(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
}

// ---- the run ----

func (m *demo) run(ctx context.Context) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("demo: run as root: containers need it")
	}
	if err := m.setup(); err != nil {
		return err
	}
	defer func() {
		if cerr := m.teardown(err != nil); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if err == nil {
			m.diagram()
		}
	}()
	phases := []func(context.Context) (bool, error){m.start, m.socket, m.shimTree, m.greet, m.connect,
		m.create, m.startTask, m.reconnect, m.stop, m.remove}
	for _, phase := range phases {
		more, err := phase(ctx)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
	return nil
}

// setup makes the private directory, the driver and the events server.
func (m *demo) setup() error {
	dir, err := os.MkdirTemp("", "shimctl-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	// The shims name their socket with 64 hex digits in SHIMWALK_SOCKET_DIR; a unix socket's
	// path has room for 107 bytes.
	if n := len(filepath.Join(dir, "s")) + 1 + 64; n > 107 {
		os.RemoveAll(dir)
		return fmt.Errorf("demo: the temporary directory %s is too deep for the shim's socket (%d bytes, at most 107): set TMPDIR to a shorter one", dir, n)
	}
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	m.dir, m.runcRoot = dir, filepath.Join(dir, "runc")
	// Unique, so that the container's cgroup never meets another run's.
	m.id = "demo-" + hex.EncodeToString(suffix[:])
	m.trace = driver.NewTrace(m.record)
	if m.traceFile != nil {
		m.trace = m.traceFile.Trace(m.record)
	}
	m.d = driver.New(filepath.Join(dir, "state"), "default", m.shim)
	m.d.Trace = m.trace
	m.d.Env = []string{"SHIMWALK_SOCKET_DIR=" + filepath.Join(dir, "s"), "SHIMWALK_RUNC_ROOT=" + m.runcRoot}

	name := "final shim"
	if m.step != finalStep {
		name = fmt.Sprintf("step %02d", m.step)
	}
	m.section("setup", "Setup: a private containerd for one container")
	m.fact("shim", m.shim+" ("+name+")")
	m.fact("state", m.d.State)
	m.fact("task id", m.id)
	m.fact("env", strings.Join(m.d.Env, " "))
	events, err := driver.ListenEvents(m.d.TTRPCAddress)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	m.events = events
	m.fact("events service", events.Address+" (TTRPC_ADDRESS)")
	if m.step < 5 {
		m.say("Shims forward task events from step 05 on; this one will send none.")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		// Owned by m: stopEvents cancels ctx and waits, then reads what is left.
		defer close(done)
		for n := 0; ; n++ {
			e, err := events.Next(ctx, n)
			if err != nil {
				return
			}
			m.trace.Event(e)
		}
	}()
	m.stopEvents = func() { cancel(); <-done }
	return nil
}

// start runs the shim's start action.
func (m *demo) start(ctx context.Context) (bool, error) {
	m.section("start", "The start action: containerd runs the shim binary")
	if m.step >= 3 {
		rootfs := filepath.Join(m.dir, "rootfs")
		m.say("Building a busybox root file system for the container in %s.", rootfs)
		if err := driver.BuildBusyboxRootfs(rootfs); err != nil {
			return false, err
		}
		if _, err := m.d.NewBundle(m.id, driver.SpecOptions{Args: demoScript, Rootfs: rootfs, Readonly: true}); err != nil {
			return false, err
		}
		m.fact("container command", strings.Join(demoScript, " "))
	} else if _, err := m.d.CreateBundle(m.id); err != nil {
		return false, err
	}
	m.fact("bundle", m.d.Bundle(m.id))
	m.say("In the bundle as working directory, with containerd's flags and environment:")
	b, err := m.d.StartShim(ctx, m.id, nil)
	var exec driver.Record
	for _, r := range m.trace.Records() {
		if r.Kind == driver.KindExec && r.Name == "start" {
			exec = r
		}
	}
	m.emit("command", demoWrap("$ "+strings.Join(exec.Args, " "), "   ", "       "), map[string]any{"args": exec.Args})
	if err != nil {
		return false, err
	}
	m.say("It opened the socket, started the long-lived shim on it, printed the address and exited after %s. Its reply on stdout:", demoLatency(exec.Duration))
	m.fact("reply", exec.Reply)
	m.fact("bootstrap", fmt.Sprintf("version %d, protocol %s, address %s", b.Version, b.Protocol, b.Address))
	m.say("The driver keeps it in %s, for a restarted containerd to find the shim again.", filepath.Join(m.d.Bundle(m.id), bundle.BootstrapFile))
	m.shimPid, err = bundle.ReadPidFile(filepath.Join(m.d.Bundle(m.id), bundle.ShimPidFile))
	if err != nil {
		return false, fmt.Errorf("the shim left no pid: %w", err)
	}
	m.fact("shim pid", m.shimPid)
	return true, nil
}

// socket shows the socket and its directory, and who may connect.
func (m *demo) socket(context.Context) (bool, error) {
	b, err := driver.ReadBootstrap(m.d.Bundle(m.id))
	if err != nil {
		return false, err
	}
	m.section("socket", "The socket: only its owner may talk to the shim")
	path := b.SocketPath()
	for _, p := range []string{filepath.Dir(path), path} {
		fi, err := os.Stat(p)
		if err != nil {
			return false, err
		}
		owner := -1
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = int(st.Uid)
		}
		m.emit("file", demoWrap(fmt.Sprintf("%v %#o uid=%d %s", fi.Mode(), fi.Mode().Perm(), owner, p), "   ", "       "),
			map[string]any{"path": p, "mode": fmt.Sprintf("%#o", fi.Mode().Perm()), "type": fi.Mode().Type().String(), "uid": owner})
	}
	m.say("A shim checks its peer's credentials too: containerd runs as root, and so must its caller.")
	return true, nil
}

// shimTree shows where the long-lived shim sits among processes.
func (m *demo) shimTree(context.Context) (bool, error) {
	m.section("shim-tree", "The long-lived shim: not shimctl's child, its own process group")
	shim, err := driver.ReadProc(m.shimPid)
	if err != nil {
		return false, fmt.Errorf("the shim %d is gone: %w", m.shimPid, err)
	}
	self, _ := driver.ReadProc(os.Getpid())
	m.procTable(self, shim)
	parent, _ := driver.ReadProc(shim.PPid)
	m.say("Its parent is %d (%s), not shimctl (%d): the start action's helper exited and the shim was re-parented. It leads process group %d, so a Ctrl-C meant for shimctl never reaches it.",
		shim.PPid, demoShort(parent.Command, 24), self.Pid, shim.Pgid)
	return true, nil
}

// procTable prints processes with pid, ppid, pgid and sid, one a line.
func (m *demo) procTable(procs ...driver.Proc) {
	m.emit("table", fmt.Sprintf("   %7s %7s %7s %7s  %s", "PID", "PPID", "PGID", "SID", "COMMAND"), nil)
	for _, p := range procs {
		m.emit("process", fmt.Sprintf("   %7d %7d %7d %7d  %s", p.Pid, p.PPid, p.Pgid, p.Sid, demoShort(p.Command, demoWidth-38)),
			map[string]any{"pid": p.Pid, "ppid": p.PPid, "pgid": p.Pgid, "sid": p.Sid, "command": p.Command})
	}
}

// demoNode is a process at its depth in a tree.
type demoNode struct {
	driver.Proc
	depth int
}

// processTree reads pid and its descendants from /proc, depth first.
func processTree(pid, depth int) []demoNode {
	p, err := driver.ReadProc(pid)
	if err != nil || depth > 4 {
		return nil
	}
	nodes := []demoNode{{p, depth}}
	for _, c := range p.Children {
		nodes = append(nodes, processTree(c, depth+1)...)
	}
	return nodes
}

// treeTable prints a process tree as procTable does, each command indented by its depth.
func (m *demo) treeTable(nodes []demoNode) {
	procs := make([]driver.Proc, len(nodes))
	for i, n := range nodes {
		procs[i] = n.Proc
		procs[i].Command = strings.Repeat("  ", n.depth) + runcAction(n.Command)
	}
	m.procTable(procs...)
}

// runcAction shortens a runc command line to what it does ("runc ... create"): its flags and
// paths would not fit.
func runcAction(cmd string) string {
	f := strings.Fields(cmd)
	if len(f) < 3 || filepath.Base(f[0]) != "runc" {
		return cmd
	}
	for _, a := range f[1:] {
		switch a {
		case "create", "start", "kill", "delete", "state", "exec", "pause", "resume", "update":
			return "runc ... " + a
		}
	}
	return cmd
}

func demoShort(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}

// greet reads step 01's greeting: that shim serves no RPC, it only says who it is.
func (m *demo) greet(ctx context.Context) (bool, error) {
	if m.step != 1 {
		return true, nil
	}
	m.section("greeting", "Connecting: step 01 answers with a greeting, no RPC yet")
	b, err := driver.ReadBootstrap(m.d.Bundle(m.id))
	if err != nil {
		return false, err
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", b.SocketPath())
	if err != nil {
		return false, fmt.Errorf("connect to the shim: %w", err)
	}
	_ = conn.SetDeadline(time.Now().Add(demoTimeout))
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil {
		return false, fmt.Errorf("read the greeting: %w", err)
	}
	m.fact("greeting", strings.TrimSpace(line))
	m.section("delete", "The delete action stops the shim and cleans up after it")
	if err := m.deleteAction(ctx); err != nil {
		return false, err
	}
	m.say("Step 01 stops here: the Task service over ttrpc arrives in step 02.")
	return false, nil
}

// deleteAction runs the shim's delete action and removes the bundle.
func (m *demo) deleteAction(ctx context.Context) error {
	resp, err := m.d.DeleteShim(ctx, m.id)
	if err != nil {
		return err
	}
	m.fact("delete reply", fmt.Sprintf("pid %d, exit status %d", resp.Pid, resp.ExitStatus))
	if err := m.d.RemoveBundle(m.id); err != nil {
		return err
	}
	m.fact("bundle removed", m.d.Bundle(m.id))
	return nil
}

// connect makes the first ttrpc call, and for step 02 shows that Create is not there yet.
func (m *demo) connect(ctx context.Context) (bool, error) {
	m.section("connect", "ttrpc: the Task service on the socket")
	c, err := m.d.Connect(ctx, m.id)
	if err != nil {
		return false, err
	}
	m.conn = c
	resp, err := c.Task.Connect(ctx, &taskapi.ConnectRequest{ID: m.id})
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	m.fact("Connect", fmt.Sprintf("shim pid %d, task pid %d, version %s", resp.ShimPid, resp.TaskPid, resp.Version))
	if m.step != 2 {
		return true, nil
	}
	m.section("create", "Create: what step 02 answers")
	_, err = c.Task.Create(ctx, &taskapi.CreateTaskRequest{ID: m.id, Bundle: m.d.Bundle(m.id)})
	if driver.Code(err) != codes.Unimplemented {
		return false, fmt.Errorf("step 02 answered Create with %v, not Unimplemented", err)
	}
	m.fact("Create", "Unimplemented: "+driver.Message(err))
	m.section("delete", "Shutdown ends the shim; the delete action cleans up after it")
	if err := m.removeShim(ctx); err != nil {
		return false, err
	}
	m.say("Step 02 stops here: containers arrive in step 03.")
	return false, nil
}

// removeShim is the driver's RemoveShim, narrated.
func (m *demo) removeShim(ctx context.Context) error {
	c := m.conn
	m.conn = nil
	if err := m.d.RemoveShim(ctx, c, m.id); err != nil {
		return err
	}
	m.fact("bundle removed", m.d.Bundle(m.id))
	return nil
}

// create is the Create RPC, and where the container's init ends up.
func (m *demo) create(ctx context.Context) (bool, error) {
	m.section("create", "Create: the shim runs runc create")
	fifos, err := m.d.NewFIFOs(m.id, false)
	if err != nil {
		return false, err
	}
	m.fifos = fifos
	m.greeted = make(chan struct{})
	out := &demoLineWriter{line: func(s string) {
		m.emit("output", "   container| "+s, map[string]any{"stream": "stdout", "line": s})
		if strings.HasPrefix(s, "hello") {
			select {
			case <-m.greeted:
			default:
				close(m.greeted)
			}
		}
	}}
	errw := &demoLineWriter{line: func(s string) {
		m.emit("output", "   container! "+s, map[string]any{"stream": "stderr", "line": s})
	}}
	m.attached, err = fifos.Attach(context.WithoutCancel(ctx), nil, out, errw)
	if err != nil {
		return false, err
	}
	m.fact("stdio", "FIFOs in "+fifos.Dir)
	m.created = true
	// runc create is the init's first parent only while Create runs: /proc is sampled meanwhile
	// to show it.
	stopSampling := make(chan struct{})
	sampled := make(chan [][]demoNode, 1)
	go func() {
		// Owned by create: ends when stopSampling is closed, right after the Create call.
		var trees [][]demoNode
		for {
			if tree := processTree(m.shimPid, 0); len(tree) > 1 {
				trees = append(trees, tree)
			}
			select {
			case <-stopSampling:
				sampled <- trees
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	resp, err := m.conn.Task.Create(ctx, &taskapi.CreateTaskRequest{ID: m.id, Bundle: m.d.Bundle(m.id), Stdout: fifos.Stdout, Stderr: fifos.Stderr})
	close(stopSampling)
	trees := <-sampled
	if err != nil {
		return false, fmt.Errorf("create: %w", err)
	}
	m.fact("container init pid", resp.Pid)
	// The last view with the init below runc create, or else the fullest one.
	var during []demoNode
	for _, tree := range trees {
		if len(tree) > len(during) {
			during = tree
		}
	}
	for _, tree := range trees {
		for _, n := range tree {
			if n.Pid == int(resp.Pid) && n.depth > 1 {
				during = tree
			}
		}
	}
	if len(during) > 1 {
		m.say("Processes during Create, as /proc showed them: the shim ran runc create, whose child becomes the container's init.")
		m.treeTable(during)
	}
	firstParent := 0
	for _, n := range during {
		if n.Pid == int(resp.Pid) {
			firstParent = n.PPid
		}
	}
	m.containerTree(int(resp.Pid), "after Create", firstParent)
	return true, nil
}

// containerTree shows the shim and the container's init, and whose child the init is.
func (m *demo) containerTree(pid int, when string, firstParent int) {
	shim, _ := driver.ReadProc(m.shimPid)
	init, err := driver.ReadProc(pid)
	if err != nil {
		m.say("The container's init %d is already gone.", pid)
		return
	}
	m.say("Processes %s:", when)
	m.procTable(shim, init)
	if when != "after Create" {
		return
	}
	forked := "runc create forked the init and exited"
	if firstParent > 0 {
		forked = fmt.Sprintf("runc create (%d) forked the init and exited", firstParent)
	}
	if init.PPid == m.shimPid {
		m.say("%s; the orphaned init was re-parented to the shim (%d), a child subreaper: the shim will reap it and learn its exit status.", forked, m.shimPid)
		return
	}
	parent, _ := driver.ReadProc(init.PPid)
	m.say("%s; the orphaned init was re-parented to %d (%s), not to the shim (%d): the shim cannot collect its exit. Step 04 makes the shim a subreaper.",
		forked, init.PPid, demoShort(parent.Command, 24), m.shimPid)
}

// startTask is the Start RPC.
func (m *demo) startTask(ctx context.Context) (bool, error) {
	m.section("start-task", "Start: runc start, and the container runs")
	resp, err := m.conn.Task.Start(ctx, &taskapi.StartRequest{ID: m.id})
	if err != nil {
		return false, fmt.Errorf("start: %w", err)
	}
	select {
	case <-m.greeted:
	case <-time.After(demoTimeout):
		return false, errors.New("the container said nothing")
	case <-ctx.Done():
		return false, ctx.Err()
	}
	m.containerTree(int(resp.Pid), "while it runs", 0)
	return true, nil
}

// reconnect shows, from step 06 on, that a driver that lost its connection finds the shim
// again through bootstrap.json.
func (m *demo) reconnect(ctx context.Context) (bool, error) {
	if m.step < 6 {
		return true, nil
	}
	m.section("reconnect", "A restarted containerd reconnects through bootstrap.json")
	data, err := os.ReadFile(filepath.Join(m.d.Bundle(m.id), bundle.BootstrapFile))
	if err != nil {
		return false, err
	}
	m.fact("bootstrap.json", string(data))
	m.conn.Close()
	m.conn = nil
	c, err := m.d.Connect(ctx, m.id)
	if err != nil {
		return false, err
	}
	m.conn = c
	st, err := c.Task.State(ctx, &taskapi.StateRequest{ID: m.id})
	if err != nil {
		return false, fmt.Errorf("state: %w", err)
	}
	m.fact("State", fmt.Sprintf("%s, pid %d", st.Status, st.Pid))
	return true, nil
}

// stop sends SIGTERM and learns the exit status, by Wait or, without it, by polling State.
func (m *demo) stop(ctx context.Context) (bool, error) {
	m.section("exit", "Kill: SIGTERM, and the exit status")
	if _, err := m.conn.Task.Kill(ctx, &taskapi.KillRequest{ID: m.id, Signal: uint32(syscall.SIGTERM)}); err != nil {
		return false, fmt.Errorf("kill: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	resp, err := m.conn.Task.Wait(wctx, &taskapi.WaitRequest{ID: m.id})
	switch {
	case err == nil:
		m.fact("exit status", fmt.Sprintf("%d at %s (Wait)", resp.ExitStatus, formatTime(resp.ExitedAt)))
		return true, nil
	case driver.Code(err) != codes.Unimplemented:
		return false, fmt.Errorf("wait: %w", err)
	}
	m.say("This shim has no Wait (it arrives in step 05): polling State until STOPPED.")
	st, err := driver.PollStopped(wctx, m.conn, m.id, 100*time.Millisecond)
	if err != nil {
		return false, err
	}
	m.fact("exit status", fmt.Sprintf("%d (State %s)", st.ExitStatus, st.Status))
	if m.step < 4 {
		m.say("The shim never saw the exit: runc's state only says the container stopped, so the status is unknown (255). Step 04 fixes that.")
	}
	return true, nil
}

// remove is Delete, Shutdown and the delete action.
func (m *demo) remove(ctx context.Context) (bool, error) {
	m.section("delete", "Delete: runc delete; Shutdown and the delete action end the shim")
	resp, err := m.conn.Task.Delete(ctx, &taskapi.DeleteRequest{ID: m.id})
	if err != nil {
		return false, fmt.Errorf("delete: %w", err)
	}
	m.created = false
	m.fact("Delete", fmt.Sprintf("pid %d, exit status %d", resp.Pid, resp.ExitStatus))
	if err := m.removeShim(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// teardown stops and removes whatever the demo started that is still there. It runs on every
// path; after a complete run it only has the events server and the directory left.
func (m *demo) teardown(failed bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	m.section("cleanup", "Cleanup: nothing of this run is left")
	var errs []error
	if _, err := os.Stat(m.d.Bundle(m.id)); err == nil {
		m.say("Taking down what is left of the task.")
		switch {
		case m.conn != nil && m.created:
			errs = append(errs, m.d.ForceDelete(ctx, m.conn, m.id))
		case m.conn != nil:
			errs = append(errs, m.d.RemoveShim(ctx, m.conn, m.id))
		default:
			_, err := m.d.DeleteShim(ctx, m.id)
			errs = append(errs, err, m.d.RemoveBundle(m.id))
		}
		m.conn = nil
	}
	if m.conn != nil {
		m.conn.Close()
	}
	// A shim that survived all that (its delete action failed) is still ours.
	if m.shimPid > 0 && isOurShim(m.shimPid, m.d.Address) {
		m.say("Killing the shim %d, which outlived its delete action.", m.shimPid)
		_ = syscall.Kill(m.shimPid, syscall.SIGKILL)
	}
	// Containers that outlived their shim: before step 04 nothing else can stop them.
	root := filepath.Join(m.runcRoot, "default")
	if out, err := exec.Command("runc", "--root", root, "list", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			m.say("Removing the container %s, which outlived its shim.", id)
			errs = append(errs, exec.Command("runc", "--root", root, "delete", "-f", id).Run())
		}
	}
	if m.attached != nil {
		m.attached.Close()
	}
	if m.fifos != nil {
		errs = append(errs, m.fifos.Remove())
	}
	m.stopEvents()
	errs = append(errs, m.events.Close())
	// Events that arrived after the reader stopped still belong to the trace.
	for _, e := range m.events.Events()[m.eventsSeen():] {
		m.trace.Event(e)
	}
	if mounts, _ := driver.MountsUnder(m.dir); len(mounts) > 0 {
		errs = append(errs, fmt.Errorf("mounts left under %s, not removed: %s", m.dir, strings.Join(mounts, ", ")))
	} else {
		errs = append(errs, os.RemoveAll(m.dir))
		m.fact("removed", m.dir)
	}
	err := errors.Join(errs...)
	if err == nil && !failed {
		m.say("No shim, no container, no file of this run remains.")
	}
	return err
}

// eventsSeen is how many events the trace holds.
func (m *demo) eventsSeen() int {
	n := 0
	for _, r := range m.trace.Records() {
		if r.Kind == driver.KindEvent {
			n++
		}
	}
	return n
}

// isOurShim reports whether pid is a live process started with -address address: a shim of
// this run, and not a process that reused its pid.
func isOurShim(pid int, address string) bool {
	p, err := driver.ReadProc(pid)
	if err != nil || p.State == 'Z' {
		return false
	}
	return strings.Contains(p.Command, "-address "+address+" ")
}

// diagram prints the trace as a Mermaid sequence diagram.
func (m *demo) diagram() {
	mermaid := m.trace.Mermaid()
	m.section("diagram", "The run as a Mermaid sequence diagram")
	if m.json {
		m.emit("mermaid", "", map[string]any{"diagram": mermaid})
		return
	}
	m.emit("mermaid", "```mermaid\n"+strings.TrimRight(mermaid, "\n")+"\n```", nil)
}

// demoLineWriter calls line for every complete line written to it.
type demoLineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

func (w *demoLineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
