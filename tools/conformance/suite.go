// SPDX-License-Identifier: Apache-2.0

// One run of the suite per shim, and the cleanup after it. The suite (TestMain of
// integration/client) starts its own containerd at fixed paths (/run/containerd-test,
// /var/lib/containerd-test), namespace "testing", and stops it when done; a run that dies or
// times out leaves that containerd, its shims, their runc containers, mounts and cgroups. What
// is left is found by what only this run made (the tool's descendants, procs.go; runc containers
// below the suite's paths; cgroups that were not there before) and ended by PID, never by a
// process name, since other containerds may run. An earlier run that was itself killed is
// cleaned up after once before the first start.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
)

const (
	suiteState     = "/run/containerd-test"
	suiteRoot      = "/var/lib/containerd-test"
	suiteNamespace = "testing"
	suiteLock      = suiteState + ".lock"
)

// runcRoots are where the shims keep runc state by default for the suite's namespace:
// containerd-shim-runc-v2's, then the final shim's (docs/deploy.md, "Where state lives").
var runcRoots = []string{"/run/containerd/runc/" + suiteNamespace, "/run/shimwalk/runc/" + suiteNamespace}

// shims are the two runs: the name of the results file and the runtime the suite asks for.
var shims = []struct{ name, runtime string }{
	{"reference", "io.containerd.runc.v2"},
	{"final", "io.containerd.shimwalk.v2"},
}

func runCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var (
		o                               reportOpts
		suite, ctrdBin, shimBin, fpBin  string
		busybox, runExpr, timeout, only string
		pkgDir                          string
		hang, shimTimeout               time.Duration
		starts                          int
	)
	o.flags(fs)
	fs.StringVar(&suite, "suite", "", "the integration/client test binary (go test -c)")
	fs.StringVar(&ctrdBin, "containerd-bin", "", "directory of containerd v2.4.2's containerd and containerd-shim-runc-v2")
	fs.StringVar(&shimBin, "shim-bin", "", "directory of containerd-shim-shimwalk-v2")
	fs.StringVar(&fpBin, "fp-bin", "", "directory of containerd's runc-fp failpoint wrapper")
	fs.StringVar(&pkgDir, "pkg-dir", "", "the suite's source directory: go test runs a package's tests there, and they read its testdata")
	fs.StringVar(&busybox, "busybox", "/bin/busybox", "static busybox the stand-in images are built from")
	fs.StringVar(&runExpr, "run", "", "only the suite's tests matching this -test.run expression")
	fs.StringVar(&timeout, "timeout", "40m", "the suite's -test.timeout per shim")
	fs.DurationVar(&hang, "hang", 2*time.Minute, "a start without a test event this long since its last one is stopped, its running tests recorded as hung")
	fs.DurationVar(&shimTimeout, "shim-timeout", 15*time.Minute, "all starts of the suite for one shim end by then; its tests not run by then are reported as not run")
	fs.IntVar(&starts, "starts", 6, "at most this many starts of the suite per shim (the first and its restarts after a hang)")
	fs.StringVar(&only, "shim", "", "run only this shim (reference or final), keep the other's last results")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if starts < 1 || shimTimeout <= 0 || hang <= 0 {
		return fmt.Errorf("run: -starts, -shim-timeout and -hang must be positive")
	}
	if only != "" && only != shims[0].name && only != shims[1].name {
		return fmt.Errorf("run: -shim %q: want %s or %s", only, shims[0].name, shims[1].name)
	}
	o.partial = runExpr != ""
	runDir := o.resultsDir()
	for flagName, v := range map[string]string{"pkg-dir": pkgDir, "suite": suite, "containerd-bin": ctrdBin, "shim-bin": shimBin, "fp-bin": fpBin, "out": o.out} {
		if v == "" {
			return fmt.Errorf("run: -%s is required", flagName)
		}
	}
	for _, f := range []string{filepath.Join(ctrdBin, "containerd"), filepath.Join(ctrdBin, "containerd-shim-runc-v2"),
		filepath.Join(shimBin, "containerd-shim-shimwalk-v2"), filepath.Join(fpBin, "runc-fp"), suite} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("run: %w", err)
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	// The suite's paths are fixed, so two runs on one machine, whatever their -out, would share
	// its containerd and clean up each other's containers: the second waits for the first.
	lock, err := os.OpenFile(suiteLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Printf("conformance: waiting for the conformance run that holds %s\n", suiteLock)
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			return fmt.Errorf("run: lock %s: %w", suiteLock, err)
		}
	}
	if err := becomeSubreaper(); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	for _, l := range cleanupStale() {
		fmt.Println("conformance: cleaned up after an earlier run:", l)
	}
	// Nothing records which cgroups of the suite's namespace an earlier run or anything else
	// made: only those that appear from here on are this run's to remove.
	cgroupsBefore := suiteCgroups(driver.CgroupRoots())
	// A partial run's directory holds only this run's results, never an older partial run's.
	if o.partial {
		if err := os.RemoveAll(runDir); err != nil {
			return err
		}
		if err := os.MkdirAll(runDir, 0o755); err != nil {
			return err
		}
	}

	bin, applets, err := busyboxApplets(busybox)
	if err != nil {
		return err
	}
	repos, err := build(standIns(bin, applets))
	if err != nil {
		return err
	}
	srv, err := serveStandIns("127.0.0.1:0", repos)
	if err != nil {
		return err
	}
	defer srv.Close()
	caFile := filepath.Join(o.out, "ca.pem")
	if err := os.WriteFile(caFile, srv.CAPEM, 0o644); err != nil {
		return err
	}

	for _, s := range shims {
		if only != "" && only != s.name {
			continue
		}
		env := suiteEnv(os.Environ(), map[string]string{
			// The suite starts "containerd" from PATH, and that containerd finds both shims and
			// runc-fp in PATH: v2.4.2's own binaries first, so Debian's 1.6 is never used.
			"PATH":             strings.Join([]string{ctrdBin, shimBin, fpBin, os.Getenv("PATH")}, string(os.PathListSeparator)),
			"TEST_RUNTIME":     s.runtime,
			"HTTPS_PROXY":      srv.URL,
			"SSL_CERT_FILE":    caFile,
			"https_proxy":      "",
			"NO_PROXY":         "",
			"no_proxy":         "",
			"HTTP_PROXY":       "",
			"http_proxy":       "",
			"SSL_CERT_DIR":     "",
			"TEST_SNAPSHOTTER": "",
		})
		t0 := time.Now()
		sr := &shimRun{suite: suite, pkgDir: pkgDir, name: s.name, out: runDir, env: env, runExpr: runExpr,
			timeout: timeout, hang: hang, total: shimTimeout, starts: starts,
			clean: func(work string) []string { return cleanup(work, cgroupsBefore) }}
		left, runErr := sr.run(ctx)
		d := time.Since(t0).Round(time.Second)
		fmt.Printf("conformance: %s (%s) ran %s: %v\n", s.name, s.runtime, d, runErr)
		if sr.cutShort != "" {
			fmt.Printf("conformance: %s: %s; the tests it did not get to are reported as not run\n", s.name, sr.cutShort)
		}
		for _, l := range left {
			fmt.Println("conformance: cleaned up after the run:", l)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if runErr != nil {
			return fmt.Errorf("%s: %w", s.name, runErr)
		}
		if err := os.WriteFile(filepath.Join(runDir, s.name+".time"), []byte(d.String()), 0o644); err != nil {
			return err
		}
	}
	return report(o)
}

// suiteEnv is base with set applied; an empty value removes the variable, so that a caller's
// proxy or trust settings never reach the suite.
func suiteEnv(base []string, set map[string]string) []string {
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; ok || strings.HasPrefix(k, "SHIMWALK_") {
			continue
		}
		env = append(env, kv)
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if set[k] != "" {
			env = append(env, k+"="+set[k])
		}
	}
	return env
}

// shimRun is the suite's runs for one shim: out/<name>.json gets their test2json events and
// out/<name>.log their containerd's log. The suite waits for some things without a deadline,
// and a shim that never reports an exit would hold the whole run until -test.timeout ends it and
// every result with it. So a start without any event for hang is stopped, what it left is
// cleaned up, the tests still running are recorded as hung, and the suite is started again
// without them and without those already done; and all starts together get total and at most
// starts, so that a shim that hangs test after test cannot hold the run for hours.
type shimRun struct {
	suite, pkgDir, name, out string
	env                      []string
	runExpr, timeout         string
	hang, total              time.Duration
	starts                   int
	clean                    func(work string) []string // ends what one start left

	// cutShort says why the run stopped before the suite was done, "" when it was not.
	cutShort string
}

func (r *shimRun) run(ctx context.Context) ([]string, error) {
	jf, err := os.Create(filepath.Join(r.out, r.name+".json"))
	if err != nil {
		return nil, err
	}
	defer jf.Close()
	lf, err := os.Create(filepath.Join(r.out, r.name+".log"))
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	runCtx, cancel := context.WithTimeout(ctx, r.total)
	defer cancel()
	var left []string
	skip := map[string]bool{}
	for attempt := 1; ; attempt++ {
		// go test runs a package's tests in its directory; the module cache's copy is
		// read-only, so the suite runs in a directory of its own with a copy of the testdata it
		// reads, and with its temporary files (TestMain leaves its containerd's config and log
		// there when it exits) below it.
		work, err := os.MkdirTemp("", "conformance-")
		if err != nil {
			return left, err
		}
		if err := os.CopyFS(filepath.Join(work, "testdata"), os.DirFS(filepath.Join(r.pkgDir, "testdata"))); err != nil {
			return left, fmt.Errorf("suite testdata: %w", err)
		}
		if err := os.Mkdir(filepath.Join(work, "tmp"), 0o700); err != nil {
			return left, err
		}
		st, err := runOnce(runCtx, r.suite, work, jf, lf, append(r.env, "TMPDIR="+filepath.Join(work, "tmp")), r.runExpr, skipExpr(skip), r.timeout, r.hang)
		left = append(left, r.clean(work)...)
		if lerr := appendContainerdLog(lf, filepath.Join(work, "tmp"), attempt); lerr != nil && err == nil {
			err = lerr
		}
		if len(suiteMounts(work)) == 0 {
			if rerr := os.RemoveAll(work); rerr != nil && err == nil {
				err = rerr
			}
		} else {
			left = append(left, "mounts below "+work+" remain: it is kept")
		}
		outOfTime := ctx.Err() == nil && runCtx.Err() != nil
		if outOfTime {
			r.cutShort = fmt.Sprintf("ran out of its %s (-shim-timeout)", r.total)
		}
		if err != nil && !outOfTime {
			return left, err
		}
		if len(st.hung) == 0 && !outOfTime {
			return left, nil
		}
		why := fmt.Sprintf("conformance: no test event for %s: the run was stopped and started again without this test\n", r.hang)
		if outOfTime {
			why = fmt.Sprintf("conformance: the shim's runs took more than %s (-shim-timeout): stopped while this test ran\n", r.total)
		}
		for _, t := range st.hung {
			for _, ev := range []event{{Action: "output", Test: t, Output: why}, {Action: "hung", Test: t}} {
				b, _ := json.Marshal(ev)
				if _, err := jf.Write(append(b, '\n')); err != nil {
					return left, err
				}
			}
			skip[topLevel(t)] = true
		}
		if outOfTime {
			return left, nil
		}
		for _, t := range st.done {
			skip[topLevel(t)] = true
		}
		if attempt == r.starts {
			r.cutShort = fmt.Sprintf("still hanging after %d starts (-starts)", attempt)
			return left, nil
		}
		fmt.Printf("conformance: %s: %s hung; starting the suite again without %d tests\n", r.name, strings.Join(st.hung, ", "), len(skip))
	}
}

// appendContainerdLog copies the log of the containerd one start of the suite ran into lf. The
// suite's TestMain writes its containerd's output to a file os.CreateTemp("", "") names (only
// digits) in TMPDIR and prints it to stderr, which test2json merges into its events, only when
// a test failed; it never removes that file, as it leaves by os.Exit.
func appendContainerdLog(lf *os.File, tmp string, attempt int) error {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return fmt.Errorf("containerd's log: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.Trim(e.Name(), "0123456789") != "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(tmp, e.Name()))
		if err != nil {
			return fmt.Errorf("containerd's log: %w", err)
		}
		if _, err := fmt.Fprintf(lf, "=== start %d of the suite: containerd's log\n%s", attempt, b); err != nil {
			return fmt.Errorf("containerd's log: %w", err)
		}
	}
	return nil
}

func topLevel(test string) string {
	top, _, _ := strings.Cut(test, "/")
	return top
}

// skipExpr is a -test.skip expression for these top-level tests, "" for none.
func skipExpr(tests map[string]bool) string {
	if len(tests) == 0 {
		return ""
	}
	names := make([]string, 0, len(tests))
	for t := range tests {
		names = append(names, regexp.QuoteMeta(t))
	}
	sort.Strings(names)
	return "^(" + strings.Join(names, "|") + ")$"
}

// runState is what one start of the suite got to: the tests that ended, and those it was
// running when it was stopped for hanging.
type runState struct {
	done, hung []string
}

// tracker follows the events of one start of the suite. Until its first event, when TestMain
// pulls the seed image and starts containerd and no test runs that a restart could leave out,
// only the shim's deadline bounds it.
type tracker struct {
	mu    sync.Mutex
	last  time.Time         // zero before the first event
	state map[string]string // test -> its latest action
}

func (tr *tracker) see(line []byte) {
	var ev event
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.last = time.Now()
	if json.Unmarshal(line, &ev) != nil || ev.Test == "" {
		return
	}
	switch ev.Action {
	case "run", "cont", "pause", "pass", "fail", "skip":
		tr.state[ev.Test] = ev.Action
	}
}

func (tr *tracker) quiet() time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.last.IsZero() {
		return 0
	}
	return time.Since(tr.last)
}

func (tr *tracker) result(stopped bool) runState {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var st runState
	for t, a := range tr.state {
		switch {
		case a == "pass" || a == "fail" || a == "skip":
			st.done = append(st.done, t)
		case stopped && (a == "run" || a == "cont"):
			st.hung = append(st.hung, t)
		}
	}
	sort.Strings(st.hung)
	return st
}

// runOnce starts the suite under test2json once. The suite exits non-zero when a test fails,
// which is not an error here: the results say which. When ctx ends it stops the suite, and
// says which tests were running then besides ctx's error.
func runOnce(ctx context.Context, suite, work string, jf, lf *os.File, env []string, runExpr, skip, timeout string, hang time.Duration) (runState, error) {
	args := []string{"tool", "test2json", "-t", "-p", "integration/client", suite,
		"-test.root", "-test.v=test2json", "-no-criu", "-test.timeout", timeout}
	if runExpr != "" {
		args = append(args, "-test.run", runExpr)
	}
	if skip != "" {
		args = append(args, "-test.skip", skip)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return runState{}, err
	}
	defer pr.Close()
	cmd := exec.Command("go", args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, pw, lf
	cmd.Dir = work
	// Its own process group, so that stopping it ends test2json, the suite and its containerd
	// together; the shims, which containerd starts in sessions of their own, are cleanup's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return runState{}, fmt.Errorf("start %s: %w", suite, err)
	}
	tr := &tracker{state: map[string]string{}}
	read := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			tr.see(line)
			if _, err := jf.Write(append(line, '\n')); err != nil {
				read <- err
				return
			}
		}
		read <- sc.Err()
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(min(5*time.Second, hang))
	defer tick.Stop()
	stopped := false
	cancelled := ctx.Done()
	for waiting := true; waiting; {
		select {
		case err = <-exited:
			waiting = false
		case <-cancelled:
			cancelled = nil
			stopped = true
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-tick.C:
			reapExited(cmd.Process.Pid)
			if tr.quiet() > hang && !stopped {
				stopped = true
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	}
	if rerr := <-read; rerr != nil {
		return runState{}, fmt.Errorf("reading the suite's events: %w", rerr)
	}
	if ctx.Err() != nil {
		return tr.result(true), ctx.Err()
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return runState{}, err
	}
	return tr.result(stopped), nil
}

// cleanup ends what the run left and says what that was: the tool's descendants (its containerd
// and the shims, re-parented to the tool), runc containers whose bundle is below the suite's
// paths, mounts below them, and the empty cgroups of the suite's namespace that were not in
// before.
func cleanup(work string, before map[string]bool) []string {
	left := endDescendants()
	return append(left, cleanupFiles(work, before)...)
}

// cleanupStale cleans up, before the first start, after an earlier run that was killed with
// its suite: its processes are not the tool's descendants (staleSuiteProcesses says how they
// are recognised), and no cgroup is removed, since nothing says which were that run's.
func cleanupStale() []string {
	var left []string
	for _, pid := range staleSuiteProcesses() {
		c := cmdline(pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			left = append(left, fmt.Sprintf("process %d (%s)", pid, c))
		}
	}
	return append(left, cleanupFiles("", nil)...)
}

// cleanupFiles removes the runc containers, mounts and directories a run left, and the empty
// cgroups of the suite's namespace that are not in before (none when before is nil).
func cleanupFiles(work string, before map[string]bool) []string {
	var left []string
	for _, root := range runcRoots {
		for _, id := range suiteContainers(root) {
			out, err := exec.Command("runc", "--root", root, "delete", "-f", id).CombinedOutput()
			left = append(left, fmt.Sprintf("runc container %s in %s (delete: %v %s)", id, root, err, bytes.TrimSpace(out)))
		}
	}
	for _, m := range suiteMounts(work) {
		err := syscall.Unmount(m, syscall.MNT_DETACH)
		left = append(left, fmt.Sprintf("mount %s (unmount: %v)", m, err))
	}
	for _, d := range newEmptyCgroups(driver.CgroupRoots(), before) {
		if err := os.Remove(d); err == nil {
			left = append(left, "cgroup "+d)
		}
	}
	// The suite removes its root when it ends normally, and never its state directory.
	if len(suiteMounts(work)) == 0 {
		for _, d := range []string{suiteState, suiteRoot} {
			if _, err := os.Stat(d); err == nil {
				if err := os.RemoveAll(d); err != nil {
					left = append(left, fmt.Sprintf("directory %s (remove: %v)", d, err))
				}
			}
		}
	}
	return left
}

// cmdline is pid's command line as a shell would show it, for a report.
func cmdline(pid int) string { return strings.Join(driver.Cmdline(pid), " ") }

// suiteContainers are the runc containers in the suite's namespace whose bundle the suite's
// containerd made.
func suiteContainers(root string) []string {
	out, err := exec.Command("runc", "--root", root, "list", "-f", "json").Output()
	if err != nil {
		return nil
	}
	var list []struct {
		ID     string `json:"id"`
		Bundle string `json:"bundle"`
	}
	if json.Unmarshal(out, &list) != nil {
		return nil
	}
	var ids []string
	for _, c := range list {
		if strings.HasPrefix(c.Bundle, suiteState+"/") {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// suiteMounts are the mount points below the suite's paths and its working directory, deepest
// first.
func suiteMounts(work string) []string {
	var ms []string
	for _, p := range []string{suiteState, suiteRoot, work} {
		if p == "" {
			continue
		}
		below, err := driver.MountsUnder(p)
		if err != nil {
			return nil
		}
		ms = append(ms, below...)
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i]) > len(ms[j]) })
	return ms
}

// newEmptyCgroups lists the suite's cgroups (suiteCgroups) in hierarchies that are not in
// before and hold no process, deepest first; none when before is nil.
func newEmptyCgroups(hierarchies []string, before map[string]bool) []string {
	if before == nil {
		return nil
	}
	var dirs []string
	for d := range suiteCgroups(hierarchies) {
		if !before[d] {
			dirs = append(dirs, d)
		}
	}
	sort.Slice(dirs, func(i, j int) bool {
		if len(dirs[i]) != len(dirs[j]) {
			return len(dirs[i]) > len(dirs[j])
		}
		return dirs[i] < dirs[j]
	})
	var empty []string
	for _, d := range dirs {
		procs, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err == nil && len(bytes.TrimSpace(procs)) == 0 {
			empty = append(empty, d)
		}
	}
	return empty
}
