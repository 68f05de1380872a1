// SPDX-License-Identifier: Apache-2.0

// Unit tests of what shimctl works out without a shim: signals, sizes, event lines, the
// step-aware message for a call a shim lacks, an example for every command. The tests that
// build and drive the binary are in package cli_test (shimctl_test.go and the rest).

package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/api/types"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shimwalk/shimwalk/final/driver"
)

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32 // 0: an error
	}{
		{"9", 9}, {"KILL", 9}, {"SIGKILL", 9}, {"term", 15}, {"SigTerm", 15}, {"INT", 2},
		{"64", 64}, {"0", 0}, {"65", 0}, {"-1", 0}, {"BOGUS", 0}, {"", 0}, {"SIG", 0},
	} {
		got, err := parseSignal(tc.in)
		if tc.want == 0 {
			if err == nil {
				t.Errorf("parseSignal(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseSignal(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestFormatEvent(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	stamp := at.Local().Format(time.RFC3339Nano)
	exit := driver.Event{Timestamp: at, Namespace: "ns", Topic: "/tasks/exit", Event: &eventstypes.TaskExit{
		ContainerID: "c1", ID: "c1", Pid: 42, ExitStatus: 0, ExitedAt: timestamppb.New(at),
	}}
	create := driver.Event{Timestamp: at, Namespace: "ns", Topic: "/tasks/create", Event: &eventstypes.TaskCreate{
		ContainerID: "c1", Bundle: "/b/c1", Pid: 42,
		Rootfs: []*types.Mount{{Type: "overlay", Source: "overlay", Options: []string{"lowerdir=/l", "upperdir=/u"}}},
		IO:     &eventstypes.TaskIO{Stdout: "/f/out"},
	}}
	for _, tc := range []struct {
		e    driver.Event
		want string
	}{
		// exit_status=0 is shown: zero is an answer, not an absence.
		{exit, stamp + " ns /tasks/exit container=c1 id=c1 pid=42 exit_status=0 exited_at=" + stamp},
		{create, stamp + " ns /tasks/create container=c1 bundle=/b/c1 rootfs=[{type=overlay source=overlay options=[\"lowerdir=/l\" \"upperdir=/u\"]}] io={stdout=/f/out} pid=42"},
		{driver.Event{Timestamp: at, Namespace: "ns", Topic: "/x"}, stamp + " ns /x"},
	} {
		got, err := formatEvent(tc.e, false)
		if err != nil || got != tc.want {
			t.Errorf("formatEvent:\n got %s (%v)\nwant %s", got, err, tc.want)
		}
	}

	line, err := formatEvent(exit, true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(line, "\n") {
		t.Errorf("JSON event spans lines: %q", line)
	}
	var obj struct {
		Timestamp time.Time
		Namespace string
		Topic     string
		Type      string
		Event     struct {
			ContainerID string `json:"container_id"`
			Pid         int
		}
	}
	if err := json.Unmarshal([]byte(line), &obj); err != nil {
		t.Fatalf("JSON event %s: %v", line, err)
	}
	if !obj.Timestamp.Equal(at) || obj.Namespace != "ns" || obj.Topic != "/tasks/exit" ||
		obj.Type != "containerd.events.TaskExit" || obj.Event.ContainerID != "c1" || obj.Event.Pid != 42 {
		t.Errorf("JSON event %s decodes to %+v", line, obj)
	}
}

// TestEveryCommandHasAnExample walks the command tree: --help shows an example everywhere.
func TestEveryCommandHasAnExample(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" && !c.Hidden && c.Name() != "help" && c.Name() != "completion" &&
			(c.Parent() == nil || c.Parent().Name() != "completion") {
			t.Errorf("%s has no example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRoot(&globals{})
	root.InitDefaultCompletionCmd()
	walk(root)
}

func TestDescribeForStepShims(t *testing.T) {
	for _, tc := range []struct{ shim, msg, want string }{
		{"containerd-shim-step02-v2", "Create: added in step 03-runc-create", "step 02 does not implement Create yet; it arrives in step 03"},
		{"containerd-shim-step04-v2", "Wait: added in step 05-wait-events", "step 04 does not implement Wait yet; it arrives in step 05"},
		{"containerd-shim-step06-v2", "Pids: added in final", "step 06 does not implement Pids yet; it arrives in the final shim"},
		{"containerd-shim-step06-v2", "Create with a terminal: added in final", "step 06 does not implement Create with a terminal yet; it arrives in the final shim"},
		{"my-shim", "Pause: added in final", "this shim does not implement Pause yet; it arrives in the final shim"},
		{"containerd-shim-step03-v2", "no such thing", "this shim does not implement that call: no such thing"},
	} {
		err := fmt.Errorf("create: %w", status.Error(codes.Unimplemented, tc.msg))
		if got := describeFor(tc.shim, err); got != tc.want {
			t.Errorf("describeFor(%q, %q) = %q, want %q", tc.shim, tc.msg, got, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // 0: an error
	}{
		{"1024", 1024}, {"64m", 64 << 20}, {"64M", 64 << 20}, {"1g", 1 << 30}, {"2kb", 2048},
		{"0", 0}, {"-1m", 0}, {"m", 0}, {"lots", 0}, {"", 0}, {"99999999999t", 0},
	} {
		got, err := parseSize(tc.in)
		if (tc.want == 0) != (err != nil) || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}
