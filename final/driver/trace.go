// SPDX-License-Identifier: Apache-2.0

// Recording what the driver did, for narration and sequence diagrams. containerd has no such
// recorder; its closest relative is the ttrpc client interceptor of core/runtime/v2/shim.go,
// which this decorator resembles, and the events it logs at debug level.

package driver

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Kinds of trace records.
const (
	KindExec  = "exec"  // the shim binary run with an action (start, delete)
	KindRPC   = "rpc"   // one call of the Task service
	KindEvent = "event" // one event the shim forwarded
	KindExit  = "exit"  // a reaped exit, as Wait, State or a TaskExit event told it
	// KindCommand opens the records of one shimctl invocation in a trace file: Name is the
	// command's path ("shimctl run"), Args its arguments.
	KindCommand = "command"
	// KindPoint is a step in a mechanism, told by the participant that took it: the driver
	// (reading bootstrap.json) or, in a trace file, a step shim given SHIMWALK_TRACE (the
	// start helper's re-exec, the reaper's routing of an exit). Name says what happened.
	KindPoint = "point"
)

// TraceEnv names the file a step shim appends its trace points to (steps/*/trace.go).
const TraceEnv = "SHIMWALK_TRACE"

// Participants of trace points besides the driver's own ("shimctl"): the shim binary run for
// one action (start, delete), the long-lived shim, and its reap loop.
var pointParticipants = []struct{ id, label string }{
	{"helper", "shim binary, start or delete"},
	{"shim", "shim"},
	{"reaper", "reaper"},
}

// Record is one thing the driver did or saw. It encodes to JSON as is; durations and offsets
// are nanoseconds.
type Record struct {
	// Offset is when it happened, since the trace began; for an exec or an RPC, when it began.
	Offset   time.Duration `json:"offset"`
	Kind     string        `json:"kind"`
	Name     string        `json:"name"`           // exec: the action; rpc: the method; event: the topic
	Args     []string      `json:"args,omitempty"` // exec: the command line
	Duration time.Duration `json:"duration,omitempty"`
	Reply    string        `json:"reply,omitempty"` // exec: what the shim printed, quoted unless text
	// Address and Version are the bootstrap reply of a start that succeeded.
	Address   string `json:"address,omitempty"`
	Version   int    `json:"version,omitempty"`
	Error     string `json:"error,omitempty"`
	Code      string `json:"code,omitempty"` // rpc: the status code's name
	Container string `json:"container,omitempty"`
	Pid       uint32 `json:"pid,omitempty"`
	// ExitStatus is set on exit records only (0 is a status worth showing).
	ExitStatus *uint32 `json:"exit_status,omitempty"`
	// Time is when it happened on the wall clock; set in trace files only, where records of
	// several processes meet.
	Time time.Time `json:"time,omitzero"`
	// Participant is who took a point, To whom it told (none for a step of its own), and Async
	// whether the receiver takes it up later.
	Participant string `json:"participant,omitempty"`
	To          string `json:"to,omitempty"`
	Async       bool   `json:"async,omitempty"`
}

// Trace records what a driver does. Its methods may be called from several goroutines; a nil
// *Trace records nothing, so callers need not check.
type Trace struct {
	began  time.Time
	notify func(Record)

	mu      sync.Mutex
	records []Record // guarded by mu
}

// NewTrace starts a trace now. notify, when not nil, is called with each record as it is
// added, outside the trace's lock, in the adding goroutine.
func NewTrace(notify func(Record)) *Trace {
	return &Trace{began: time.Now(), notify: notify}
}

// Records returns a copy of every record so far, in the order they were added.
func (t *Trace) Records() []Record {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Record(nil), t.records...)
}

// Add appends r, stamping its offset, when it has none, with now less its duration. Records
// are in the order they were added: a call's record follows what happened while it ran.
func (t *Trace) Add(r Record) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if r.Offset == 0 {
		r.Offset = max(time.Since(t.began)-r.Duration, 0)
	}
	t.records = append(t.records, r)
	t.mu.Unlock()
	if t.notify != nil {
		t.notify(r)
	}
}

// Exec records a run of the shim binary: its command line, how long it took, what it printed
// on stdout, and how it failed.
func (t *Trace) Exec(action string, args []string, took time.Duration, stdout []byte, err error) {
	r := Record{Kind: KindExec, Name: action, Args: args, Duration: took, Reply: printable(stdout)}
	if err != nil {
		r.Error = err.Error()
	} else if action == "start" {
		if b, perr := ParseStartReply(stdout); perr == nil {
			r.Address, r.Version = b.Address, b.Version
		}
	}
	t.Add(r)
}

// Event records an event the shim forwarded, and for a TaskExit the exit it reports.
func (t *Trace) Event(e Event) {
	if t == nil {
		return
	}
	r := Record{Kind: KindEvent, Name: e.Topic}
	switch ev := e.Event.(type) {
	case *eventstypes.TaskCreate:
		r.Container, r.Pid = ev.ContainerID, ev.Pid
	case *eventstypes.TaskStart:
		r.Container, r.Pid = ev.ContainerID, ev.Pid
	case *eventstypes.TaskDelete:
		r.Container, r.Pid = ev.ContainerID, ev.Pid
	case *eventstypes.TaskExit:
		r.Container, r.Pid = ev.ContainerID, ev.Pid
	case interface{ GetContainerID() string }:
		r.Container = ev.GetContainerID()
	}
	t.Add(r)
	if ev, ok := e.Event.(*eventstypes.TaskExit); ok {
		t.exit(ev.ContainerID, ev.Pid, ev.ExitStatus, "TaskExit")
	}
}

func (t *Trace) exit(container string, pid, status uint32, via string) {
	t.Add(Record{Kind: KindExit, Name: via, Container: container, Pid: pid, ExitStatus: &status})
}

// printable is out as text when it is, or quoted, for a reply that is a protobuf.
func printable(out []byte) string {
	s := string(out)
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\n' }) {
		return strings.TrimSpace(s)
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// wrap returns task, recording each call through it in t. A nil t returns task itself.
func (t *Trace) wrap(task taskapi.TTRPCTaskService) taskapi.TTRPCTaskService {
	if t == nil {
		return task
	}
	return &tracedTask{next: task, t: t}
}

// tracedTask is the recording decorator of a Task service client.
type tracedTask struct {
	next taskapi.TTRPCTaskService
	t    *Trace
}

var _ taskapi.TTRPCTaskService = (*tracedTask)(nil)

// call runs fn as the RPC method about container id and records it.
func call[Resp any](t *Trace, method, id string, fn func() (Resp, error)) (Resp, error) {
	began := time.Now()
	resp, err := fn()
	r := Record{Kind: KindRPC, Name: method, Container: id, Duration: time.Since(began), Code: Code(err).String()}
	if err != nil {
		r.Error = Message(err)
	}
	t.Add(r)
	return resp, err
}

// State also records the exit of a process it finds stopped: before Wait (step 05) that is how
// the driver learns of it.
func (x *tracedTask) State(ctx context.Context, r *taskapi.StateRequest) (*taskapi.StateResponse, error) {
	resp, err := call(x.t, "State", r.GetID(), func() (*taskapi.StateResponse, error) { return x.next.State(ctx, r) })
	if err == nil && resp.GetStatus() == task.Status_STOPPED {
		x.t.exit(r.GetID(), resp.GetPid(), resp.GetExitStatus(), "State")
	}
	return resp, err
}

func (x *tracedTask) Create(ctx context.Context, r *taskapi.CreateTaskRequest) (*taskapi.CreateTaskResponse, error) {
	return call(x.t, "Create", r.GetID(), func() (*taskapi.CreateTaskResponse, error) { return x.next.Create(ctx, r) })
}

func (x *tracedTask) Start(ctx context.Context, r *taskapi.StartRequest) (*taskapi.StartResponse, error) {
	return call(x.t, "Start", r.GetID(), func() (*taskapi.StartResponse, error) { return x.next.Start(ctx, r) })
}

func (x *tracedTask) Delete(ctx context.Context, r *taskapi.DeleteRequest) (*taskapi.DeleteResponse, error) {
	return call(x.t, "Delete", r.GetID(), func() (*taskapi.DeleteResponse, error) { return x.next.Delete(ctx, r) })
}

func (x *tracedTask) Pids(ctx context.Context, r *taskapi.PidsRequest) (*taskapi.PidsResponse, error) {
	return call(x.t, "Pids", r.GetID(), func() (*taskapi.PidsResponse, error) { return x.next.Pids(ctx, r) })
}

func (x *tracedTask) Pause(ctx context.Context, r *taskapi.PauseRequest) (*emptypb.Empty, error) {
	return call(x.t, "Pause", r.GetID(), func() (*emptypb.Empty, error) { return x.next.Pause(ctx, r) })
}

func (x *tracedTask) Resume(ctx context.Context, r *taskapi.ResumeRequest) (*emptypb.Empty, error) {
	return call(x.t, "Resume", r.GetID(), func() (*emptypb.Empty, error) { return x.next.Resume(ctx, r) })
}

func (x *tracedTask) Checkpoint(ctx context.Context, r *taskapi.CheckpointTaskRequest) (*emptypb.Empty, error) {
	return call(x.t, "Checkpoint", r.GetID(), func() (*emptypb.Empty, error) { return x.next.Checkpoint(ctx, r) })
}

func (x *tracedTask) Kill(ctx context.Context, r *taskapi.KillRequest) (*emptypb.Empty, error) {
	return call(x.t, "Kill", r.GetID(), func() (*emptypb.Empty, error) { return x.next.Kill(ctx, r) })
}

func (x *tracedTask) Exec(ctx context.Context, r *taskapi.ExecProcessRequest) (*emptypb.Empty, error) {
	return call(x.t, "Exec", r.GetID(), func() (*emptypb.Empty, error) { return x.next.Exec(ctx, r) })
}

func (x *tracedTask) ResizePty(ctx context.Context, r *taskapi.ResizePtyRequest) (*emptypb.Empty, error) {
	return call(x.t, "ResizePty", r.GetID(), func() (*emptypb.Empty, error) { return x.next.ResizePty(ctx, r) })
}

func (x *tracedTask) CloseIO(ctx context.Context, r *taskapi.CloseIORequest) (*emptypb.Empty, error) {
	return call(x.t, "CloseIO", r.GetID(), func() (*emptypb.Empty, error) { return x.next.CloseIO(ctx, r) })
}

func (x *tracedTask) Update(ctx context.Context, r *taskapi.UpdateTaskRequest) (*emptypb.Empty, error) {
	return call(x.t, "Update", r.GetID(), func() (*emptypb.Empty, error) { return x.next.Update(ctx, r) })
}

// Wait also records the exit it returns: for the driver, that is the reaped exit.
func (x *tracedTask) Wait(ctx context.Context, r *taskapi.WaitRequest) (*taskapi.WaitResponse, error) {
	resp, err := call(x.t, "Wait", r.GetID(), func() (*taskapi.WaitResponse, error) { return x.next.Wait(ctx, r) })
	if err == nil {
		x.t.exit(r.GetID(), 0, resp.GetExitStatus(), "Wait")
	}
	return resp, err
}

func (x *tracedTask) Stats(ctx context.Context, r *taskapi.StatsRequest) (*taskapi.StatsResponse, error) {
	return call(x.t, "Stats", r.GetID(), func() (*taskapi.StatsResponse, error) { return x.next.Stats(ctx, r) })
}

func (x *tracedTask) Connect(ctx context.Context, r *taskapi.ConnectRequest) (*taskapi.ConnectResponse, error) {
	return call(x.t, "Connect", r.GetID(), func() (*taskapi.ConnectResponse, error) { return x.next.Connect(ctx, r) })
}

func (x *tracedTask) Shutdown(ctx context.Context, r *taskapi.ShutdownRequest) (*emptypb.Empty, error) {
	return call(x.t, "Shutdown", r.GetID(), func() (*emptypb.Empty, error) { return x.next.Shutdown(ctx, r) })
}

// Mermaid renders the trace as a Mermaid sequence diagram between shimctl (in containerd's
// role), the shim, and the container (runc and the container's processes) when the trace
// shows one.
func (t *Trace) Mermaid() string {
	return Mermaid(t.Records())
}

// Mermaid renders records, of one trace or of a trace file, as Trace.Mermaid does. Trace
// points add the participants that took them; with a start helper among them, the shim binary's
// actions are drawn as calls to it rather than to the long-lived shim.
func Mermaid(records []Record) string {
	container := false
	participants := map[string]bool{"shimctl": true, "shim": true}
	for _, r := range records {
		if r.Kind == KindExit || (r.Kind == KindRPC && r.Code == "OK" && runcCalls[r.Name] != "") {
			container = true
		}
		if r.Kind == KindPoint {
			participants[r.Participant] = true
			if r.To != "" {
				participants[r.To] = true
			}
		}
	}
	action := "shim"
	if participants["helper"] {
		action = "helper"
	}
	// A call is drawn as its request when it began and its reply when it ended, so that what
	// happened in between (an event the shim forwarded while answering) shows in between.
	type line struct {
		at   time.Duration
		text string
	}
	var lines []line
	add := func(at time.Duration, format string, args ...any) {
		lines = append(lines, line{at, fmt.Sprintf("    "+format+"\n", args...)})
	}
	for _, r := range records {
		switch r.Kind {
		case KindCommand:
			line := []string{r.Name}
			for _, a := range r.Args {
				line = append(line, shellQuote(a))
			}
			add(r.Offset, "Note over shimctl,shim: %s", mermaidText(strings.Join(line, " ")))
		case KindExec:
			add(r.Offset, "shimctl->>%s: exec %s", action, mermaidText(r.Name))
			reply := "exit 0"
			switch {
			case r.Error != "":
				reply = "failed: " + r.Error
			case r.Address != "":
				reply = fmt.Sprintf("version %d at %s", r.Version, r.Address)
			}
			add(r.Offset+r.Duration, "%s-->>shimctl: %s (%s)", action, mermaidText(reply), roundDuration(r.Duration))
		case KindRPC:
			add(r.Offset, "shimctl->>shim: %s", mermaidText(r.Name))
			if r.Code == "OK" && runcCalls[r.Name] != "" {
				add(r.Offset, "shim->>container: %s", runcCalls[r.Name])
			}
			reply := "OK"
			if r.Code != "OK" {
				reply = r.Code
				if r.Error != "" {
					reply += ": " + r.Error
				}
			}
			add(r.Offset+r.Duration, "shim-->>shimctl: %s (%s)", mermaidText(reply), roundDuration(r.Duration))
		case KindEvent:
			add(r.Offset, "shim-)shimctl: event %s %s", mermaidText(r.Name), mermaidText(r.Container))
		case KindPoint:
			from, to := mermaidID(r.Participant), mermaidID(r.To)
			switch {
			case to == "":
				add(r.Offset, "Note over %s: %s", from, mermaidText(r.Name))
			case r.Async:
				add(r.Offset, "%s-)%s: %s", from, to, mermaidText(r.Name))
			default:
				add(r.Offset, "%s->>%s: %s", from, to, mermaidText(r.Name))
			}
		case KindExit:
			if r.ExitStatus != nil {
				add(r.Offset, "Note over shim,container: exit status %d, seen through %s", *r.ExitStatus, mermaidText(r.Name))
			}
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(a.at, b.at) })
	var b strings.Builder
	b.WriteString("sequenceDiagram\n")
	b.WriteString("    participant shimctl as shimctl (containerd)\n")
	for _, p := range pointParticipants {
		if participants[p.id] {
			if p.id == p.label {
				fmt.Fprintf(&b, "    participant %s\n", p.id)
			} else {
				fmt.Fprintf(&b, "    participant %s as %s\n", p.id, p.label)
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(participants)) {
		if p != "shimctl" && !slices.ContainsFunc(pointParticipants, func(q struct{ id, label string }) bool { return q.id == p }) {
			fmt.Fprintf(&b, "    participant %s\n", mermaidID(p))
		}
	}
	if container {
		b.WriteString("    participant container as runc / container\n")
	}
	for _, l := range lines {
		b.WriteString(l.text)
	}
	return b.String()
}

// mermaidID makes a participant's name, which a trace file may hold anything in, a Mermaid
// participant id: letters, digits and '_' only.
func mermaidID(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s)
}

// mermaidWidth is the longest message text Mermaid is given.
const mermaidWidth = 64

// runcCalls are the RPCs whose work the shim hands to runc, and what runc does for them.
var runcCalls = map[string]string{
	"Create": "runc create",
	"Start":  "runc start",
	"Kill":   "runc kill",
	"Delete": "runc delete",
	"Pause":  "runc pause",
	"Resume": "runc resume",
	"Exec":   "runc exec",
	"Update": "runc update",
}

// mermaidText keeps s on one line of a message: Mermaid ends a message at ';' and reads '#'
// as the start of an entity.
// A long one (a socket's hashed name) is cut: the diagram stays readable.
func mermaidText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > mermaidWidth {
		s = string(r[:mermaidWidth-3]) + "..."
	}
	return strings.NewReplacer(";", ",", "#", "no.").Replace(s)
}

// shellQuote quotes an argument as a shell would need it, so that a command line shown in a note
// reads as it was typed.
func shellQuote(a string) string {
	if a != "" && !strings.ContainsFunc(a, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r == ',' || r == '@' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// roundDuration shows a duration with three significant digits or so.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// TraceFile is a file that traces are appended to, one JSON Record a line with its Time set,
// so that the shimctl invocations of one experiment add up to one trace.
type TraceFile struct {
	mu  sync.Mutex
	f   *os.File
	err error // the first failed write; guarded by mu
}

// OpenTraceFile opens path for appending, creating it.
func OpenTraceFile(path string) (*TraceFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open trace file: %w", err)
	}
	return &TraceFile{f: f}, nil
}

// Trace starts a trace whose records are appended to w as they are added, and passed on to
// notify when it is not nil.
func (w *TraceFile) Trace(notify func(Record)) *Trace {
	t := NewTrace(nil)
	t.notify = func(r Record) {
		r.Time = t.began.Add(r.Offset)
		w.write(r)
		if notify != nil {
			notify(r)
		}
	}
	return t
}

// write appends r as one line. One write call a line keeps lines whole when several processes
// append to the file at once (O_APPEND).
func (w *TraceFile) write(r Record) {
	data, err := json.Marshal(r)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		_, err = w.f.Write(append(data, '\n'))
	}
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("write trace file %s: %w", w.f.Name(), err)
	}
}

// Close closes the file and reports the first write that failed.
func (w *TraceFile) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	cerr := w.f.Close()
	if w.err != nil {
		return w.err
	}
	if cerr != nil {
		return fmt.Errorf("close trace file: %w", cerr)
	}
	return nil
}

// ReadTrace reads the records of a trace file. Their offsets are made relative to the earliest
// record, so that Mermaid orders the records of every invocation on one time line. name is
// used in errors only.
func ReadTrace(r io.Reader, name string) ([]Record, error) {
	var records []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rec Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: not a trace record: %w", name, n, err)
		}
		if rec.Kind == "" || rec.Time.IsZero() {
			return nil, fmt.Errorf("%s:%d: not a trace record: no kind or no time", name, n)
		}
		if rec.Kind == KindPoint && mermaidID(rec.Participant) == "" {
			return nil, fmt.Errorf("%s:%d: a trace point names no participant", name, n)
		}
		records = append(records, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("%s: %w", name, errEmptyTrace)
	}
	first := records[0].Time
	for _, r := range records {
		if r.Time.Before(first) {
			first = r.Time
		}
	}
	for i := range records {
		records[i].Offset = records[i].Time.Sub(first)
	}
	return records, nil
}

var errEmptyTrace = errors.New("the trace holds no records")
