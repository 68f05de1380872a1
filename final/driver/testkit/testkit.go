// SPDX-License-Identifier: Apache-2.0

// Package testkit is what every black-box test of shimwalk shares: it builds the binaries under
// test once per test process, builds a busybox rootfs, gives each test a driver with private state
// and socket directories, and checks that nothing a test started outlives it.
package testkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
)

var (
	workDir string // per test process; removed by Main

	buildMu sync.Mutex
	built   = map[string]string{} // package dir -> binary, guarded by buildMu
)

// Main wraps testing.M.Run for a test package: it provides the process-wide work directory and
// tears down what the kit started (a private containerd, temporary files) after the tests.
// Use it as `func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }`.
func Main(m *testing.M) int {
	if code, ok := runHelper(); ok {
		return code
	}
	dir, err := os.MkdirTemp("", "sw")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit:", err)
		return 1
	}
	workDir = dir
	code := m.Run()
	stopContainerd()
	removeCgroups("shimwalk-test/"+filepath.Base(dir), fmt.Sprintf("shimwalk-test-%d", os.Getpid()))
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, "testkit: clean up:", err)
	}
	return code
}

// RequireRoot fails the test under CI and skips it elsewhere when a requirement is missing.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "these tests run as root")
	}
}

// RequireCommand is RequireRoot for a program on PATH.
func RequireCommand(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			Missing(t, n+" is not installed (scripts/deps.sh installs it)")
		}
	}
}

// Missing is how a test meets a requirement the host lacks, for what RequireRoot and
// RequireCommand do not cover (a cgroup layout, a containerd build): under CI, whose machines
// scripts/deps.sh sets up with everything, it fails the test; elsewhere it skips it.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("requirement missing in CI: %s", why)
	}
	t.Skip(why)
}

// perProcess is a value the kit makes at most once per test process, such as the rootfs: the
// first test that needs it makes it, and every test fails alike if making it failed.
type perProcess[T any] struct {
	once  sync.Once
	value T
	err   error
}

// get is the value, made by build on first use.
func (p *perProcess[T]) get(t testing.TB, build func() (T, error)) T {
	t.Helper()
	p.once.Do(func() { p.value, p.err = build() })
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.value
}

// RepoRoot is the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// binaryName is the name `make build` gives the program in pkgDir (relative to the repo root).
// A step ("steps/04-subreaper") and an exercise copy of it ("work/04.2") are both step 04's shim.
func binaryName(pkgDir string) string {
	base := filepath.Base(pkgDir)
	if len(base) > 3 && base[0] >= '0' && base[0] <= '9' && base[1] >= '0' && base[1] <= '9' &&
		(base[2] == '-' || base[2] == '.') {
		return "containerd-shim-step" + base[:2] + "-v2"
	}
	return base
}

// StepBinary builds the shim in the test's own directory: the step under test, or the
// exercise copy of it that `make check` runs the same tests in.
func StepBinary(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(RepoRoot(t), cwd)
	if err != nil {
		t.Fatal(err)
	}
	return Binary(t, rel)
}

// Binary builds the program in pkgDir (relative to the repo root, e.g. "steps/01-bootstrap")
// once per test process and returns its path.
func Binary(t testing.TB, pkgDir string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkgDir]; ok {
		return p
	}
	root := RepoRoot(t)
	out := filepath.Join(WorkDir(t), "bin", binaryName(pkgDir))
	cmd := exec.Command("go", "build", "-o", out, "./"+pkgDir)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkgDir, err, msg)
	}
	built[pkgDir] = out
	return out
}

// WorkDir is the test process's scratch directory, short enough for socket paths below it.
func WorkDir(t testing.TB) string {
	t.Helper()
	if workDir == "" {
		t.Fatal("testkit.Main is not installed as TestMain")
	}
	return workDir
}

// TempDir is a fresh directory under WorkDir, removed when t ends. Unlike t.TempDir its path is
// short, so a socket inside it fits the 108-byte limit.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(WorkDir(t), "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if mounts, _ := driver.MountsUnder(dir); len(mounts) > 0 {
			t.Errorf("mounts left under %s: %v", dir, mounts)
			return // never remove through a mount point
		}
		os.RemoveAll(dir)
	})
	return dir
}

// Result is what a finished command printed and how it exited.
type Result struct {
	Stdout, Stderr string
	Code           int
	Took           time.Duration
}

// Run runs name with args in dir with env added to the test's environment and returns its
// result; a failure to run at all fails the test.
func Run(t testing.TB, dir string, env []string, name string, args ...string) Result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return run(t, cmd)
}

// run runs cmd, which has no output set, and returns its result; a failure to run at all fails
// the test.
func run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	begin := time.Now()
	err := cmd.Run()
	r := Result{Stdout: stdout.String(), Stderr: stderr.String(), Took: time.Since(begin)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", cmd.Path, err)
	}
	return r
}

// Eventually polls cond every 20ms until it holds or timeout passes, then fails the test with msg.
// Tests wait for a condition this way instead of sleeping and hoping.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeCgroups removes the (by now empty) cgroup directories the test process's containers
// were put in, and the parent all test processes share once no other uses it.
func removeCgroups(paths ...string) {
	driver.RemoveCgroups(paths...)
	for _, root := range driver.CgroupRoots() {
		os.Remove(filepath.Join(root, "shimwalk-test")) // fails while another test process uses it
	}
}
