// SPDX-License-Identifier: Apache-2.0

// One run of the suite per shim, and the cleanup after it. The suite (TestMain of
// integration/client) starts its own containerd at fixed paths (/run/containerd-test,
// /var/lib/containerd-test), namespace "testing", and stops it when done; a run that dies or
// times out leaves that containerd, its shims, their runc containers, mounts and cgroups. What
// is left is found by what only this run uses (those paths; runc containers and cgroups that were
// not there before) and ended by PID, never by a process name, since other containerds may run.
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	suiteState     = "/run/containerd-test"
	suiteRoot      = "/var/lib/containerd-test"
	suiteNamespace = "testing"
	cgroupRoot     = "/sys/fs/cgroup/" + suiteNamespace
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
		hang                            time.Duration
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
	fs.DurationVar(&hang, "hang", 2*time.Minute, "a run without test events this long is stopped, its running tests recorded as hung")
	fs.StringVar(&only, "shim", "", "run only this shim (reference or final), keep the other's last results")
	if err := fs.Parse(args); err != nil {
		return err
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
		left, runErr := runShim(ctx, suite, pkgDir, s.name, runDir, env, runExpr, timeout, hang)
		d := time.Since(t0).Round(time.Second)
		fmt.Printf("conformance: %s (%s) ran %s: %v\n", s.name, s.runtime, d, runErr)
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

// runShim runs the suite for one shim into out/<name>.json (test2json events) and out/<name>.log
// (the suite's stderr: its containerd's log). The suite waits for some things without a
// deadline, and a shim that never reports an exit would hold the whole run until -test.timeout
// ends it and every result with it. So a run without any event for hang is stopped, what it
// left is cleaned up, the tests still running are recorded as hung, and the suite is started
// again without them and without those already done.
func runShim(ctx context.Context, suite, pkgDir, name, out string, env []string, runExpr, timeout string, hang time.Duration) ([]string, error) {
	jf, err := os.Create(filepath.Join(out, name+".json"))
	if err != nil {
		return nil, err
	}
	defer jf.Close()
	lf, err := os.Create(filepath.Join(out, name+".log"))
	if err != nil {
		return nil, err
	}
	defer lf.Close()
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
		if err := os.CopyFS(filepath.Join(work, "testdata"), os.DirFS(filepath.Join(pkgDir, "testdata"))); err != nil {
			return left, fmt.Errorf("suite testdata: %w", err)
		}
		if err := os.Mkdir(filepath.Join(work, "tmp"), 0o700); err != nil {
			return left, err
		}
		st, err := runOnce(ctx, suite, work, jf, lf, append(env, "TMPDIR="+filepath.Join(work, "tmp")), runExpr, skipExpr(skip), timeout, hang)
		left = append(left, cleanup(work)...)
		if len(suiteMounts(work)) == 0 {
			if rerr := os.RemoveAll(work); rerr != nil && err == nil {
				err = rerr
			}
		} else {
			left = append(left, "mounts below "+work+" remain: it is kept")
		}
		if err != nil || len(st.hung) == 0 {
			return left, err
		}
		for _, t := range st.hung {
			msg := fmt.Sprintf("conformance: no test event for %s: the run was stopped and started again without this test\n", hang)
			for _, ev := range []event{{Action: "output", Test: t, Output: msg}, {Action: "hung", Test: t}} {
				b, _ := json.Marshal(ev)
				if _, err := jf.Write(append(b, '\n')); err != nil {
					return left, err
				}
			}
			skip[topLevel(t)] = true
		}
		for _, t := range st.done {
			skip[topLevel(t)] = true
		}
		fmt.Printf("conformance: %s: %s hung; starting the suite again without %d tests\n", name, strings.Join(st.hung, ", "), len(skip))
		if attempt == 20 {
			return left, fmt.Errorf("%s: still hanging after %d starts", name, attempt)
		}
	}
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

// tracker follows the events of one start of the suite.
type tracker struct {
	mu    sync.Mutex
	last  time.Time
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
// which is not an error here: the results say which.
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
	tr := &tracker{last: time.Now(), state: map[string]string{}}
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
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	stopped := false
	cancelled := ctx.Done()
	for waiting := true; waiting; {
		select {
		case err = <-exited:
			waiting = false
		case <-cancelled:
			cancelled = nil
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-tick.C:
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
		return runState{}, ctx.Err()
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return runState{}, err
	}
	return tr.result(stopped), nil
}

// cleanup ends what the run left and says what that was: processes that name the suite's
// paths, runc containers whose bundle is below them, mounts below them, and cgroups of the
// suite's namespace that are empty.
func cleanup(work string) []string {
	var left []string
	for _, pid := range suiteProcesses() {
		c := cmdline(pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			left = append(left, fmt.Sprintf("process %d (%s)", pid, c))
		}
	}
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
	for _, d := range emptyCgroups(cgroupRoot) {
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

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// suiteProcesses are the processes whose command line names the suite's state or root: its
// containerd (--state, --root) and the shims it started (-address).
func suiteProcesses() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		c := cmdline(pid)
		if strings.Contains(c, suiteState+"/") || strings.Contains(c, suiteState+" ") ||
			strings.Contains(c, suiteRoot+" ") || strings.HasSuffix(c, suiteState) || strings.HasSuffix(c, suiteRoot) {
			pids = append(pids, pid)
		}
	}
	return pids
}

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
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ms []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		for _, p := range []string{suiteState, suiteRoot, work} {
			if mp == p || strings.HasPrefix(mp, p+"/") {
				ms = append(ms, mp)
			}
		}
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i]) > len(ms[j]) })
	return ms
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// emptyCgroups lists the cgroups below root that hold no process, deepest first, root last.
func emptyCgroups(root string) []string {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var empty []string
	for _, d := range dirs {
		procs, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err == nil && len(bytes.TrimSpace(procs)) == 0 {
			empty = append(empty, d)
		}
	}
	return empty
}
