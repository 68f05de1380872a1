// SPDX-License-Identifier: Apache-2.0

package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeTask answers Create and Wait, and Unimplemented for everything else it is asked.
type fakeTask struct{ taskapi.TTRPCTaskService }

func (fakeTask) Create(context.Context, *taskapi.CreateTaskRequest) (*taskapi.CreateTaskResponse, error) {
	return &taskapi.CreateTaskResponse{Pid: 42}, nil
}

func (fakeTask) Wait(context.Context, *taskapi.WaitRequest) (*taskapi.WaitResponse, error) {
	return &taskapi.WaitResponse{ExitStatus: 3}, nil
}

func (fakeTask) Stats(context.Context, *taskapi.StatsRequest) (*taskapi.StatsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Stats: added in final")
}

func TestTraceRecordsThroughWrap(t *testing.T) {
	var seen []string
	tr := NewTrace(func(r Record) { seen = append(seen, r.Kind+" "+r.Name) })
	task := tr.wrap(fakeTask{})
	ctx := context.Background()
	if _, err := task.Create(ctx, &taskapi.CreateTaskRequest{ID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := task.Stats(ctx, &taskapi.StatsRequest{ID: "c1"}); Code(err) != codes.Unimplemented {
		t.Fatalf("Stats through the decorator: %v, want Unimplemented", err)
	}
	if resp, err := task.Wait(ctx, &taskapi.WaitRequest{ID: "c1"}); err != nil || resp.ExitStatus != 3 {
		t.Fatalf("Wait: %v %v", resp, err)
	}
	tr.Event(Event{Topic: "/tasks/exit", Event: &eventstypes.TaskExit{ContainerID: "c1", Pid: 42, ExitStatus: 3}})
	tr.Exec("delete", []string{"shim", "delete"}, 0, nil, errors.New("boom"))

	want := []string{"rpc Create", "rpc Stats", "rpc Wait", "exit Wait", "event /tasks/exit", "exit TaskExit", "exec delete"}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("notified %q, want %q", seen, want)
	}
	records := tr.Records()
	if records[1].Code != "Unimplemented" || records[1].Error != "Stats: added in final" {
		t.Errorf("Stats record = %+v", records[1])
	}
	if records[3].ExitStatus == nil || *records[3].ExitStatus != 3 || records[3].Container != "c1" {
		t.Errorf("Wait's exit record = %+v", records[3])
	}
	for i, r := range records {
		// Records are added as things end: a call's record begins earlier, and ends later.
		if end, prev := r.Offset+r.Duration, records[max(i-1, 0)]; end < prev.Offset+prev.Duration {
			t.Errorf("record %d ends before the one added before it: %+v, %+v", i, r, prev)
		}
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Record
		if err := json.Unmarshal(data, &back); err != nil || back.Kind != r.Kind || back.Name != r.Name {
			t.Errorf("record %d does not round-trip through JSON: %s (%v)", i, data, err)
		}
	}
}

func TestNilTraceRecordsNothing(t *testing.T) {
	var tr *Trace
	task := fakeTask{}
	if got := tr.wrap(task); got != taskapi.TTRPCTaskService(task) {
		t.Errorf("a nil trace wraps: %T", got)
	}
	tr.Exec("start", nil, 0, nil, nil)
	tr.Event(Event{Topic: "/tasks/start"})
	if tr.Records() != nil || tr.Mermaid() == "" {
		t.Errorf("nil trace: records %v, diagram %q", tr.Records(), tr.Mermaid())
	}
}

func TestMermaid(t *testing.T) {
	u := func(v uint32) *uint32 { return &v }
	ms := time.Millisecond
	tr := &Trace{records: []Record{
		{Offset: 0, Kind: KindExec, Name: "start", Args: []string{"shim", "start"}, Duration: 12345678 * time.Nanosecond,
			Reply: `{"version":2,"address":"unix:///run/s/1.sock","protocol":"ttrpc"}`, Address: "unix:///run/s/1.sock", Version: 2},
		// Added when Create returned, after the event forwarded while it ran.
		{Offset: 15 * ms, Kind: KindEvent, Name: "/tasks/create", Container: "demo"},
		{Offset: 13 * ms, Kind: KindRPC, Name: "Create", Container: "demo", Code: "OK", Duration: 20 * ms},
		{Offset: 40 * ms, Kind: KindRPC, Name: "State", Code: "NotFound", Error: strings.Repeat("x", 70)},
		{Offset: 50 * ms, Kind: KindRPC, Name: "Stats", Code: "Unimplemented", Error: "Stats: added in step 07; sorry #1",
			Duration: 300 * time.Microsecond},
		{Offset: 60 * ms, Kind: KindExit, Name: "Wait", Container: "demo", ExitStatus: u(3)},
		{Offset: 70 * ms, Kind: KindExec, Name: "delete", Duration: time.Second + 2*ms},
	}}
	want := `sequenceDiagram
    participant shimctl as shimctl (containerd)
    participant shim
    participant container as runc / container
    shimctl->>shim: exec start
    shim-->>shimctl: version 2 at unix:///run/s/1.sock (12.35ms)
    shimctl->>shim: Create
    shim->>container: runc create
    shim-)shimctl: event /tasks/create demo
    shim-->>shimctl: OK (20ms)
    shimctl->>shim: State
    shim-->>shimctl: NotFound: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (0s)
    shimctl->>shim: Stats
    shim-->>shimctl: Unimplemented: Stats: added in step 07, sorry no.1 (300µs)
    Note over shim,container: exit status 3, seen through Wait
    shimctl->>shim: exec delete
    shim-->>shimctl: exit 0 (1.002s)
`
	if got := tr.Mermaid(); got != want {
		t.Errorf("Mermaid() =\n%s\nwant\n%s", got, want)
	}
}

func TestMermaidWithoutContainer(t *testing.T) {
	tr := &Trace{records: []Record{
		{Kind: KindExec, Name: "start", Reply: "unix:///s"},
		{Kind: KindRPC, Name: "Create", Code: "Unimplemented", Error: "Create: added in step 03"},
	}}
	got := tr.Mermaid()
	if strings.Contains(got, "participant container") {
		t.Errorf("a trace without a container has a container participant:\n%s", got)
	}
	if !strings.HasPrefix(got, "sequenceDiagram\n") || !strings.Contains(got, "shim-->>shimctl: Unimplemented: Create: added in step 03") {
		t.Errorf("Mermaid() =\n%s", got)
	}
}

func TestExecRecordsTheBootstrapReply(t *testing.T) {
	tr := NewTrace(nil)
	tr.Exec("start", []string{"shim", "start"}, time.Millisecond, []byte(`{"version":3,"address":"unix:///s/1","protocol":"ttrpc"}`), nil)
	tr.Exec("start", []string{"shim", "start"}, time.Millisecond, []byte("unix:///s/2\n"), nil)
	tr.Exec("start", nil, 0, []byte("nonsense"), nil)
	tr.Exec("delete", nil, 0, []byte("unix:///s/3"), nil)
	var got []string
	for _, r := range tr.Records() {
		got = append(got, fmt.Sprintf("%s %d", r.Address, r.Version))
	}
	want := []string{"unix:///s/1 3", "unix:///s/2 2", " 0", " 0"}
	if !slices.Equal(got, want) {
		t.Errorf("address and version of the exec records: %q, want %q", got, want)
	}
}

func TestTraceFileAddsUpInvocations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	for i, id := range []string{"one", "two"} {
		w, err := OpenTraceFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var notified int
		tr := w.Trace(func(Record) { notified++ })
		tr.Add(Record{Kind: KindCommand, Name: "shimctl task state", Args: []string{id}})
		task := tr.wrap(fakeTask{})
		if _, err := task.Create(context.Background(), &taskapi.CreateTaskRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if notified != 2 {
			t.Errorf("invocation %d: notified %d times, want 2", i, notified)
		}
		time.Sleep(2 * time.Millisecond) // the second invocation starts later on the wall clock
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := ReadTrace(f, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 4 || records[0].Offset != 0 || records[2].Offset <= records[1].Offset {
		t.Fatalf("records of two invocations, offsets from the first: %+v", records)
	}
	diagram := Mermaid(records)
	first := strings.Index(diagram, "Note over shimctl,shim: shimctl task state one")
	second := strings.Index(diagram, "Note over shimctl,shim: shimctl task state two")
	if first < 0 || second < first || strings.Count(diagram, "shim->>container: runc create") != 2 {
		t.Errorf("diagram of the file:\n%s", diagram)
	}
}

func TestReadTraceRefusesWhatIsNotATrace(t *testing.T) {
	for name, text := range map[string]string{
		"empty":             "",
		"not json":          `{"kind":"rpc","time":"2026-01-01T00:00:00Z"}` + "\nhello\n",
		"no time":           `{"kind":"rpc","name":"State"}` + "\n",
		"a point of nobody": `{"kind":"point","time":"2026-01-01T00:00:00Z","name":"x"}` + "\n",
	} {
		_, err := ReadTrace(strings.NewReader(text), "t.jsonl")
		if err == nil || !strings.HasPrefix(err.Error(), "t.jsonl") {
			t.Errorf("%s: ReadTrace = %v, want an error naming the file", name, err)
		}
		if name == "not json" && !strings.Contains(err.Error(), "t.jsonl:2:") {
			t.Errorf("%s: %v does not name line 2", name, err)
		}
	}
}

func TestMermaidQuotesTheCommandLine(t *testing.T) {
	got := Mermaid([]Record{{Kind: KindCommand, Name: "shimctl run", Args: []string{"--rm", "demo", "--", "/bin/sh", "-c", "echo 'hi'; exit 3", ""}}})
	want := `Note over shimctl,shim: shimctl run --rm demo -- /bin/sh -c 'echo '\''hi'\'', exit 3' ''`
	if !strings.Contains(got, want) {
		t.Errorf("Mermaid() =\n%s\nwant a line\n%s", got, want)
	}
}

// TestMermaidDrawsTracePoints merges a step shim's points, as its trace.go writes them, with the
// driver's records of the same file: the start helper takes the exec arrows, each participant
// is declared once in its place, and an async point is drawn as one.
func TestMermaidDrawsTracePoints(t *testing.T) {
	text := `{"offset":0,"kind":"exec","name":"start","duration":10000000,"address":"unix:///s/1","version":2,"time":"2026-01-01T00:00:00Z"}
{"time":"2026-01-01T00:00:00.002Z","kind":"point","participant":"helper","name":"binds the socket (0600)"}
{"time":"2026-01-01T00:00:00.003Z","kind":"point","participant":"helper","to":"shim","name":"re-exec: listener as fd 3"}
{"time":"2026-01-01T00:00:00.020Z","kind":"point","participant":"shimctl","name":"reads bootstrap.json"}
{"offset":0,"kind":"rpc","name":"Start","code":"OK","duration":5000000,"time":"2026-01-01T00:00:00.021Z"}
{"time":"2026-01-01T00:00:00.023Z","kind":"point","participant":"reaper","to":"shim","name":"exited 3","async":true}
{"time":"2026-01-01T00:00:00.024Z","kind":"point","participant":"side car","name":"a participant of its own"}
`
	records, err := ReadTrace(strings.NewReader(text), "t.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want := `sequenceDiagram
    participant shimctl as shimctl (containerd)
    participant helper as shim binary, start or delete
    participant shim
    participant reaper
    participant side_car
    participant container as runc / container
    shimctl->>helper: exec start
    Note over helper: binds the socket (0600)
    helper->>shim: re-exec: listener as fd 3
    helper-->>shimctl: version 2 at unix:///s/1 (10ms)
    Note over shimctl: reads bootstrap.json
    shimctl->>shim: Start
    shim->>container: runc start
    reaper-)shim: exited 3
    Note over side_car: a participant of its own
    shim-->>shimctl: OK (5ms)
`
	if got := Mermaid(records); got != want {
		t.Errorf("Mermaid() =\n%s\nwant\n%s", got, want)
	}
}

// TestConnectRecordsTheBootstrapRead: reconnecting is reading bootstrap.json, which the trace
// shows as the driver's own point before the first call.
func TestConnectRecordsTheBootstrapRead(t *testing.T) {
	d := New(t.TempDir(), "ns", "/nonexistent")
	d.Trace = NewTrace(nil)
	if _, err := d.CreateBundle("demo"); err != nil {
		t.Fatal(err)
	}
	if err := bundle.WriteBootstrap(d.Bundle("demo"), Bootstrap{Version: 2, Address: "unix://" + filepath.Join(d.State, "none.sock"), Protocol: "ttrpc"}); err != nil {
		t.Fatal(err)
	}
	if c, err := d.Connect(context.Background(), "demo"); err == nil {
		c.Close()
	}
	records := d.Trace.Records()
	if len(records) != 1 || records[0].Kind != KindPoint || records[0].Participant != "shimctl" ||
		!strings.Contains(records[0].Name, "bootstrap.json") {
		t.Errorf("records of a Connect: %+v", records)
	}
}
