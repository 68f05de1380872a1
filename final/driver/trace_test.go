// SPDX-License-Identifier: Apache-2.0

package driver

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
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
	task := tr.Wrap(fakeTask{})
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
	if got := tr.Wrap(task); got != taskapi.TTRPCTaskService(task) {
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
			Reply: `{"version":2,"address":"unix:///run/s/1.sock","protocol":"ttrpc"}`},
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
    shim-->>shimctl: unix:///run/s/1.sock (12.35ms)
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
