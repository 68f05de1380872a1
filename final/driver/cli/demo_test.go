// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// demoCase is what the demo of one shim must show, and must not.
type demoCase struct {
	step    string // --step, or "" for the final shim
	want    []string
	wantNot []string
}

var demoCases = []demoCase{
	{step: "01",
		want:    []string{"$ ", " start", "reply: ", "drwx------ 0700", "Srw------- 0600", "greeting: {", "-> exec delete", "Step 01 stops here"},
		wantNot: []string{"-> Connect", "== Create"}},
	{step: "02",
		want:    []string{"-> Connect     ok", "Create: Unimplemented: ", "-> Shutdown", "-> exec delete", "Step 02 stops here"},
		wantNot: []string{"runc create", "container init pid"}},
	{step: "03",
		want: []string{"-> Create      ok", "container| hello from the container", "Processes after Create:", "not to the shim",
			"-> Wait        Unimplemented", "polling State", "exit status: 255 (State STOPPED)", "-> Delete      ok"},
		wantNot: []string{"<= event"}},
	{step: "04",
		want: []string{"a child subreaper", "-> Wait        Unimplemented", "exit status: 3 (State STOPPED)",
			"Delete: pid "},
		wantNot: []string{"<= event", "not to the shim"}},
	{step: "05",
		want: []string{"a child subreaper", "<= event /tasks/create", "<= event /tasks/start", "<= event /tasks/exit",
			"<= event /tasks/delete", "-> Wait        ok", "exit status: 3 at "},
		wantNot: []string{"polling State", "bootstrap.json:"}},
	{step: "06",
		want: []string{"reconnects through bootstrap.json", "State: RUNNING", "-> Wait        ok", "exit status: 3 at ",
			"<= event /tasks/delete"}},
	{step: "",
		want: []string{"(final shim)", "a child subreaper", "State: RUNNING", "<= event /tasks/exit", "exit status: 3 at ",
			"<= event /tasks/delete"}},
}

// demoEnv builds shimctl and every shim into one directory, as make build does, and returns
// shimctl's path.
func demoShimctl(t *testing.T) string {
	t.Helper()
	testkit.RequireRoot(t)
	testkit.RequireCommand(t, "runc", "busybox")
	for _, pkg := range []string{"steps/01-bootstrap", "steps/02-ttrpc", "steps/03-runc-create", step04, step05, step06,
		"final/cmd/containerd-shim-shimwalk-v2"} {
		testkit.Binary(t, pkg)
	}
	return testkit.Binary(t, "final/cmd/shimctl")
}

// demoTmp is a TMPDIR for one demo run, short enough for the shim's socket below it (a unix
// socket path has 108 bytes; the socket's name alone takes 64).
func demoTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "d")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// runDemo runs shimctl demo with args in a private TMPDIR and checks that it leaves nothing
// behind: no file, no shim, no container.
func runDemo(t *testing.T, bin string, args ...string) testkit.Result {
	t.Helper()
	tmp := demoTmp(t)
	r := testkit.Run(t, "", []string{"TMPDIR=" + tmp}, bin, append([]string{"demo"}, args...)...)
	expectDemoGone(t, tmp, r.Stdout)
	return r
}

var taskID = regexp.MustCompile(`task id"?[:,]\s*(?:"value":)?"?(demo-[0-9a-f]+)`)

var initPid = regexp.MustCompile(`container init pid"?[:,]\s*(?:"value":)?(\d+)`)

// expectDemoGone fails the test for anything of a demo run in tmp that is left.
func expectDemoGone(t *testing.T, tmp, stdout string) {
	t.Helper()
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the demo left %s in its TMPDIR", left[0].Name())
	}
	ofDemo := func(args []string) bool { return strings.Contains(strings.Join(args, " "), tmp) }
	for _, pid := range driver.ProcessesWhere(ofDemo) {
		t.Errorf("process %d of the demo outlived it: %q", pid, driver.Cmdline(pid))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if m := taskID.FindStringSubmatch(stdout); m != nil {
		if left, _ := filepath.Glob("/sys/fs/cgroup/shimwalk/*/" + m[1]); len(left) > 0 {
			t.Errorf("the demo left cgroups: %v", left)
		}
	}
	if m := initPid.FindStringSubmatch(stdout); m != nil {
		pid, _ := strconv.Atoi(m[1])
		if driver.Alive(pid) {
			t.Errorf("the container's init %d outlived the demo", pid)
		}
	}
}

func TestDemoEachStep(t *testing.T) {
	bin := demoShimctl(t)
	for _, c := range demoCases {
		name := "final"
		args := []string{}
		if c.step != "" {
			name, args = "step"+c.step, []string{"--step", c.step}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runDemo(t, bin, args...)
			if r.Code != 0 {
				t.Fatalf("demo %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.Code, r.Stdout, r.Stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.Stdout, w) {
					t.Errorf("demo %v does not show %q", args, w)
				}
			}
			for _, w := range c.wantNot {
				if strings.Contains(r.Stdout, w) {
					t.Errorf("demo %v shows %q, which its step does not have", args, w)
				}
			}
			for _, w := range []string{"== Setup", "== The start action", "== The socket", "== The long-lived shim",
				"== Cleanup", "No shim, no container, no file of this run remains."} {
				if !strings.Contains(r.Stdout, w) {
					t.Errorf("demo %v does not show %q", args, w)
				}
			}
			prose, diagram, ok := strings.Cut(r.Stdout, "```mermaid\n")
			if !ok || !strings.HasPrefix(diagram, "sequenceDiagram\n") || !strings.HasSuffix(diagram, "```\n") {
				t.Errorf("demo %v ends without a Mermaid sequenceDiagram block:\n%s", args, r.Stdout)
			}
			for _, line := range strings.Split(prose, "\n") {
				if n := len([]rune(line)); n > 80 {
					t.Errorf("demo %v: a line of %d columns: %q", args, n, line)
				}
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
			}

			j := runDemo(t, bin, append(args, "--json")...)
			if j.Code != 0 {
				t.Fatalf("demo %v --json: exit %d, stderr %s", args, j.Code, j.Stderr)
			}
			kinds := map[string]int{}
			var mermaid string
			for _, line := range strings.Split(strings.TrimSuffix(j.Stdout, "\n"), "\n") {
				var obj map[string]any
				if err := json.Unmarshal([]byte(line), &obj); err != nil {
					t.Fatalf("demo %v --json: a line is not a JSON object: %q (%v)", args, line, err)
				}
				kind, _ := obj["kind"].(string)
				kinds[kind]++
				if kind == "mermaid" {
					mermaid, _ = obj["diagram"].(string)
				}
			}
			if !strings.HasPrefix(mermaid, "sequenceDiagram\n") {
				t.Errorf("demo %v --json: no mermaid record with a sequenceDiagram: %q", args, mermaid)
			}
			if kinds["phase"] < 5 || kinds["exec"] != 2 {
				t.Errorf("demo %v --json: records by kind %v, want phases and the start and delete execs", args, kinds)
			}
			if c.step != "01" && kinds["rpc"] == 0 {
				t.Errorf("demo %v --json: no rpc records: %v", args, kinds)
			}
		})
	}
}

func TestDemoUsage(t *testing.T) {
	bin := demoShimctl(t)
	for _, args := range [][]string{{"--step", "07"}, {"--step", "x"}, {"--step", "03", "--shim", bin}, {"extra"}} {
		tmp := demoTmp(t)
		r := testkit.Run(t, "", []string{"TMPDIR=" + tmp}, bin, append([]string{"demo"}, args...)...)
		if r.Code != 2 || r.Stdout != "" || !strings.HasPrefix(r.Stderr, "shimctl: ") {
			t.Errorf("demo %v: exit %d, stdout %q, stderr %q; want a usage error", args, r.Code, r.Stdout, r.Stderr)
		}
		expectDemoGone(t, tmp, "")
	}
}

// A TMPDIR too deep for the shim's socket is refused before anything starts.
func TestDemoDeepTmpdir(t *testing.T) {
	bin := demoShimctl(t)
	deep := filepath.Join(demoTmp(t), strings.Repeat("d", 60))
	if err := os.Mkdir(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	r := testkit.Run(t, "", []string{"TMPDIR=" + deep}, bin, "demo", "--step", "01")
	if r.Code != 1 || !strings.Contains(r.Stderr, "set TMPDIR to a shorter one") {
		t.Errorf("demo in a deep TMPDIR: exit %d, stderr %q", r.Code, r.Stderr)
	}
	expectDemoGone(t, deep, r.Stdout)
}

// An interrupted demo takes down what it started, whatever phase it is in.
func TestDemoInterrupted(t *testing.T) {
	bin := demoShimctl(t)
	tmp := demoTmp(t)
	cmd := exec.Command(bin, "demo")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var out strings.Builder
	go func() {
		// Owned by the test: ends at the demo's EOF, which the kill below guarantees.
		sc := bufio.NewScanner(stdout)
		interrupted := false
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if !interrupted && strings.Contains(sc.Text(), "container| hello") {
				interrupted = true
				_ = cmd.Process.Signal(os.Interrupt)
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the demo did not end after SIGINT; stderr %q", stderr.String())
	}
	if !strings.Contains(out.String(), "container| hello") {
		t.Fatalf("the demo never ran its container: %v\n%s\n%s", err, out.String(), stderr.String())
	}
	if !strings.Contains(out.String(), "== Cleanup") {
		t.Errorf("an interrupted demo shows no cleanup:\n%s", out.String())
	}
	// Whatever call the interrupt cut short says it was cancelled.
	if err != nil && !strings.Contains(stderr.String(), "cancel") {
		t.Errorf("an interrupted demo: %v, stderr %q", err, stderr.String())
	}
	expectDemoGone(t, tmp, out.String())
}
