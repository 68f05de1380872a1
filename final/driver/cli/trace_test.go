// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/ttrpc"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// TestTraceAddsUpInvocations runs a task through three traced invocations on step 05, with a
// traced `shimctl events` listening throughout as containerd would, and reads the trace file
// back: one command record each, the start action with its bootstrap reply, the RPCs with
// their codes, the events, and the exit. Then it draws the file.
func TestTraceAddsUpInvocations(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step05)
	trace := filepath.Join(testkitDir(t, s), "run.jsonl")
	events := s.background("--trace", trace, "events")
	testkit.Eventually(t, 10*time.Second, "events never listened", func() bool {
		return strings.Contains(events.stderr.String(), "serving events at")
	})
	if r := s.run("--trace", trace, "run", "-d", "traced", "--", "/bin/sh", "-c", "exit 3"); r.Code != 0 {
		t.Fatalf("run -d: %d %s", r.Code, r.Stderr)
	}
	s.track("traced")
	if r := s.run("--trace", trace, "task", "wait", "traced"); r.Code != 3 {
		t.Fatalf("task wait: %d %s", r.Code, r.Stderr)
	}
	if r := s.run("--trace", trace, "task", "delete", "traced"); r.Code != 0 {
		t.Fatalf("task delete: %d %s", r.Code, r.Stderr)
	}
	testkit.Eventually(t, 10*time.Second, "no TaskDelete event", func() bool {
		return strings.Contains(events.stdout.String(), "/tasks/delete")
	})
	if code := events.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("events ended with %d: %s", code, events.stderr.String())
	}
	var seen []string
	for _, r := range readTrace(t, trace) {
		switch r.Kind {
		case driver.KindCommand:
			seen = append(seen, strings.Join(append([]string{"command", r.Name}, r.Args...), " "))
		case driver.KindExec:
			seen = append(seen, "exec "+r.Name)
			if r.Name == "start" && (r.Version != 2 || !strings.HasPrefix(r.Address, "unix://"+s.sockets+"/")) {
				t.Errorf("start record without its bootstrap reply: %+v", r)
			}
		case driver.KindRPC:
			code := r.Code
			if r.Name == "Shutdown" && r.Error == ttrpc.ErrClosed.Error() {
				// The step's shim may exit before its reply leaves; the driver takes that as done.
				code = "OK"
			}
			seen = append(seen, "rpc "+r.Name+" "+code)
			if r.Duration <= 0 {
				t.Errorf("rpc record without a duration: %+v", r)
			}
		case driver.KindEvent:
			seen = append(seen, "event "+r.Name)
		case driver.KindExit:
			if r.ExitStatus == nil || *r.ExitStatus != 3 {
				t.Errorf("exit record without status 3: %+v", r)
			}
			seen = append(seen, "exit "+r.Name)
		}
	}
	all := strings.Join(seen, "\n")
	// Events arrive while calls are answered: each is looked for on its own, the rest in order.
	for _, want := range []string{"event /tasks/create", "event /tasks/start", "event /tasks/exit", "exit TaskExit", "event /tasks/delete"} {
		if !strings.Contains(all, want) {
			t.Errorf("the trace has no %q:\n%s", want, all)
		}
	}
	var ordered []string
	for _, l := range seen {
		if !strings.HasPrefix(l, "event ") && l != "exit TaskExit" {
			ordered = append(ordered, l)
		}
	}
	want := []string{
		"command shimctl events",
		"command shimctl run --detach traced -- /bin/sh -c exit 3", "exec start", "rpc Create OK", "rpc Start OK",
		"command shimctl task wait traced", "rpc Wait OK", "exit Wait",
		"command shimctl task delete traced", "rpc Delete OK", "rpc Shutdown OK", "exec delete",
	}
	if strings.Join(ordered, "\n") != strings.Join(want, "\n") {
		t.Errorf("the trace, events aside:\n%s\nwant\n%s", strings.Join(ordered, "\n"), strings.Join(want, "\n"))
	}

	r := s.run("trace", "mermaid", trace)
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "sequenceDiagram\n") ||
		!strings.Contains(r.Stdout, "Note over shimctl,shim: shimctl task wait traced") ||
		!strings.Contains(r.Stdout, "Note over shim,container: exit status 3, seen through Wait") {
		t.Errorf("trace mermaid: %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// TestTraceServesEvents runs a traced run --rm on step 05 with nobody listening for events: the
// traced command serves the events service itself while it runs, records every event, and
// removes the socket when it ends.
func TestTraceServesEvents(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step05)
	trace := filepath.Join(testkitDir(t, s), "run.jsonl")
	if r := s.run("--trace", trace, "run", "--rm", "served", "--", "/bin/sh", "-c", "echo hi; exit 3"); r.Code != 3 || r.Stdout != "hi\n" {
		t.Fatalf("run --rm: %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	s.expectNoTask("served")
	if _, err := os.Stat(filepath.Join(s.state, "events.sock")); err == nil {
		t.Error("the traced command left its events socket")
	}
	topics := map[string]bool{}
	for _, r := range readTrace(t, trace) {
		if r.Kind == driver.KindEvent {
			topics[r.Name] = true
		}
	}
	for _, want := range []string{"/tasks/create", "/tasks/start", "/tasks/exit", "/tasks/delete"} {
		if !topics[want] {
			t.Errorf("no %s event in the trace: %v", want, topics)
		}
	}
}

func TestTraceUsage(t *testing.T) {
	t.Parallel()
	s := newShimctl(t, step05)
	dir := testkitDir(t, s)
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"kind\":\"rpc\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expectRefused(t, s.run, []refusal{
		{[]string{"trace", "mermaid"}, 2, "takes one trace file"},
		{[]string{"trace", "mermaid", filepath.Join(dir, "none")}, 1, "no such file"},
		{[]string{"trace", "mermaid", bad}, 1, "bad.jsonl:1: not a trace record"},
		{[]string{"--trace", bad, "trace", "mermaid", bad}, 2, "--trace does not go with the trace command"},
		{[]string{"--trace", filepath.Join(dir, "no", "such", "dir"), "ls"}, 1, "open trace file"},
	})
	if data, _ := os.ReadFile(bad); string(data) != "{\"kind\":\"rpc\"}\n" {
		t.Errorf("the trace file was written to by trace mermaid: %q", data)
	}
}

// readTrace reads the records of the trace file at path.
func readTrace(t *testing.T, path string) []driver.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := driver.ReadTrace(f, path)
	if err != nil {
		t.Fatal(err)
	}
	return records
}

// testkitDir is the directory holding s's state, for the test's own files.
func testkitDir(t *testing.T, s *shimctl) string {
	t.Helper()
	return filepath.Dir(s.state)
}
