// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// commandTimeout bounds one output command or one diagram scenario.
const commandTimeout = 60 * time.Second

// sandbox is the private environment a command of the docs runs in.
type sandbox struct {
	dir, state, runcRoot string
	env                  []string
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	dir := testkit.TempDir(t)
	s := &sandbox{dir: dir, state: filepath.Join(dir, "state"), runcRoot: filepath.Join(dir, "runc")}
	s.env = []string{
		"SHIMCTL_STATE=" + s.state,
		"SHIMWALK_SOCKET_DIR=" + filepath.Join(dir, "s"),
		"SHIMWALK_RUNC_ROOT=" + s.runcRoot,
		"TMPDIR=" + dir,
		// Whatever the caller's terminal, the output is the one a plain pipe gets.
		"TERM=dumb", "NO_COLOR=1",
	}
	t.Cleanup(func() { s.cleanup(t) })
	return s
}

// run runs script with sh -c in root, within the sandbox, and returns its stdout and stderr.
func (s *sandbox) run(root, script string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), s.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, so that a timeout ends what the script started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v: %w", commandTimeout, err)
	}
	return stdout.String(), stderr.String(), err
}

// cleanup fails the test for anything the commands left behind in the sandbox, and removes it:
// shims and other processes started with a path of the sandbox, runc containers, mounts.
func (s *sandbox) cleanup(t *testing.T) {
	t.Helper()
	for _, pid := range processesUnder(s.dir) {
		t.Errorf("process %d (%s) outlived the docs' commands", pid, strings.Join(driver.Cmdline(pid), " "))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	namespaces, _ := os.ReadDir(s.runcRoot)
	for _, ns := range namespaces {
		root := filepath.Join(s.runcRoot, ns.Name())
		out, _ := exec.Command("runc", "--root", root, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			t.Errorf("runc container %s/%s outlived the docs' commands", ns.Name(), id)
			_ = exec.Command("runc", "--root", root, "delete", "-f", id).Run()
		}
	}
	if mounts, _ := driver.MountsUnder(s.dir); len(mounts) > 0 {
		t.Errorf("mounts left under %s: %v", s.dir, mounts)
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	}
}

// processesUnder lists the live processes with an argument naming dir or a path below it.
func processesUnder(dir string) []int {
	return driver.ProcessesWhere(func(args []string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return a == dir || strings.Contains(a, dir+"/") })
	})
}

// Masks, applied in order. The order matters: an address is masked whole before the
// temporary path and the hex name inside it.
var masks = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`unix://[^\s"')\]]+`), "<addr>"},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?(?: [A-Z]{3,4})?`), "<time>"},
	{regexp.MustCompile(`\b\d\d:\d\d:\d\d(?:\.\d+)?\b`), "<time>"},
	// A temporary directory: /tmp, or the sandbox (already <tmp>), and a name made unique by
	// a random number.
	{regexp.MustCompile(`(?:/tmp|<tmp>)(?:/[\w.-]*\d{5,}[\w.-]*)*`), "<tmp>"},
	{regexp.MustCompile(`\b[0-9a-f]{12,}\b`), "<hex>"},
	{regexp.MustCompile(`\b(?:\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h))+\b`), "<dur>"},
	{regexp.MustCompile(`(?i)(\bpids?\b["']?\s*[=:]?\s*)\d+`), "${1}<pid>"},
	{regexp.MustCompile(`(\bpid )\d+`), "${1}<pid>"},
}

// shortHex masks hex ids of 6 to 11 digits, which need a digit and a letter to be told from
// words and numbers.
var shortHex = regexp.MustCompile(`\b[0-9a-f]{6,11}\b`)

// mask replaces what changes from run to run in out with placeholders. sandbox is the private
// directory the run used.
func mask(out, sandbox string) string {
	if sandbox != "" {
		out = strings.ReplaceAll(out, sandbox, "<tmp>")
	}
	for _, m := range masks {
		out = m.re.ReplaceAllString(out, m.repl)
	}
	return shortHex.ReplaceAllStringFunc(out, func(s string) string {
		if strings.ContainsAny(s, "0123456789") && strings.ContainsAny(s, "abcdef") {
			return "<hex>"
		}
		return s
	})
}

// outputResult is what one output command printed, masked, or why it could not run.
type outputResult struct {
	masked string
	stderr string
	err    error
}

// runOutputs runs the output commands of p one after another, each in a sandbox of its own.
func runOutputs(t *testing.T, root string, p *page) []outputResult {
	var results []outputResult
	for _, b := range p.blocks {
		if b.kind != kindOutput {
			continue
		}
		s := newSandbox(t)
		stdout, stderr, err := s.run(root, b.arg)
		if _, exited := err.(*exec.ExitError); exited {
			err = nil // a command may end with a status on purpose: its output is what counts
		}
		// The checkout's own path differs from machine to machine too.
		stdout = strings.ReplaceAll(stdout, root+"/", "<repo>/")
		results = append(results, outputResult{masked: mask(stdout, s.dir), stderr: stderr, err: err})
	}
	return results
}

// applyOutputs compares the output blocks of p with results, in order, or with update
// rewrites them.
func applyOutputs(p *page, results []outputResult, update bool) (bool, []problem) {
	var probs []problem
	changed := false
	n := 0
	for i := range p.blocks {
		b := p.blocks[i]
		if b.kind != kindOutput {
			continue
		}
		if n >= len(results) {
			probs = append(probs, problem{p.path, b.line, b.marker(), "was not run (the page changed while the test ran?)"})
			continue
		}
		r := results[n]
		n++
		if r.err != nil {
			probs = append(probs, problem{p.path, b.line, b.marker(), fmt.Sprintf("could not run: %v\n%s", r.err, r.stderr)})
			continue
		}
		if p.content(b) == r.masked {
			continue
		}
		if update {
			changed = p.replace(b, r.masked) || changed
			continue
		}
		probs = append(probs, problem{p.path, b.line, b.marker(), fmt.Sprintf(
			"the block differs from the command's masked output (go test ./docs -update rewrites it)\n%s\n\tstderr: %s",
			firstDifference(p.content(b), r.masked), strings.TrimSpace(r.stderr))})
	}
	return changed, probs
}
