// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// soakCounts is how hard TestSoak pushes. `make soak` sets SHIMWALK_SOAK=long for the long
// counts; each count can be set on its own through its variable.
type soakCounts struct {
	containers int // churned through the grouped shim, start to delete
	workers    int // churning side by side
	execs      int // in one container of the group
	group      int // containers the grouped shim serves for the whole soak
	generation int // of containerd
}

func soakConfig(t *testing.T) soakCounts {
	c := soakCounts{containers: 20, workers: 4, execs: 50, group: 20, generation: 2}
	if os.Getenv("SHIMWALK_SOAK") == "long" {
		c.containers, c.execs = 200, 1000
	}
	for name, p := range map[string]*int{
		"SHIMWALK_SOAK_CONTAINERS": &c.containers, "SHIMWALK_SOAK_WORKERS": &c.workers,
		"SHIMWALK_SOAK_EXECS": &c.execs, "SHIMWALK_SOAK_GROUP": &c.group,
		"SHIMWALK_SOAK_CONTAINERD": &c.generation,
	} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive number", name, v)
			}
			*p = n
		}
	}
	return c
}

// shimUsage is what a long-lived shim holds: open files, goroutines and resident memory.
type shimUsage struct {
	fds, goroutines int
	rssKiB          int
	files           map[string]int // what the fds point at, sockets and pipes by kind
}

func (u shimUsage) String() string {
	return fmt.Sprintf("fds %d, goroutines %d, RSS %d KiB", u.fds, u.goroutines, u.rssKiB)
}

// soak is one private containerd and the group whose shim lives through the whole soak.
type soak struct {
	*env
	group   string // the group annotation
	members []string
	shim    int
}

// ctrQuiet runs ctr from any goroutine: it reports instead of failing the test.
func (s *soak) ctrQuiet(args ...string) (stdout, stderr string, code int, err error) {
	cmd := s.c.CtrCommand(context.Background(), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errOut.String(), ee.ExitCode(), nil
	}
	return out.String(), errOut.String(), 0, err
}

// parallel runs job(0..n-1) on workers goroutines and returns the first failures.
func parallel(n, workers int, job func(i int) error) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			// Owned by parallel: ends when next is closed, and parallel waits for it.
			defer wg.Done()
			for i := range next {
				if err := job(i); err != nil {
					mu.Lock()
					if len(errs) < 10 {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// churn runs one short container through the group, from start to delete, and checks its
// output and exit status.
func (s *soak) churn(name string) error {
	out, errOut, code, err := s.ctrQuiet(append(s.runArgs("--rm", "--annotation", s.group), s.id(name), "/bin/sh", "-c", "echo "+name+"; exit 3")...)
	if err != nil || code != 3 || out != name+"\n" {
		return fmt.Errorf("container %s: exit %d, stdout %q, %v %s", name, code, out, err, errOut)
	}
	return nil
}

// exec runs one exec in the group's first container and checks its output and exit status.
func (s *soak) exec(n int) error {
	id := "x" + strconv.Itoa(n)
	out, errOut, code, err := s.ctrQuiet("task", "exec", "--fifo-dir", s.fifoDir(), "--exec-id", id, s.members[0], "/bin/sh", "-c", "echo "+id+"; exit 4")
	if err != nil || code != 4 || out != id+"\n" {
		return fmt.Errorf("exec %s: exit %d, stdout %q, %v %s", id, code, out, err, errOut)
	}
	return nil
}

// round churns containers through the group and runs execs in it at the same time, as on a
// busy node, and returns the first failures of each.
func (s *soak) round(counts soakCounts, containers, execs int, prefix string) []error {
	var execErrs []error
	execsDone := make(chan struct{})
	base := map[string]int{"warm": 1000000}[prefix] // exec ids unique across rounds
	go func() {
		// Owned by round: waited for below.
		defer close(execsDone)
		execErrs = parallel(execs, 2, func(i int) error { return s.exec(base + i) })
	}()
	errs := parallel(containers, counts.workers, func(i int) error { return s.churn(fmt.Sprintf("%s%d", prefix, i)) })
	<-execsDone
	return append(errs, execErrs...)
}

var goroutineDump = regexp.MustCompile(`msg="goroutine dump" pid=(\d+) goroutines=(\d+)`)

// goroutines asks the shim for a goroutine dump (SIGUSR1) and reads the count from the log
// containerd copies the shim's log into.
func (s *soak) goroutines() int {
	s.t.Helper()
	log := filepath.Join(s.c.Dir, "containerd.log")
	dumps := func() []int {
		data, _ := os.ReadFile(log)
		var counts []int
		for _, m := range goroutineDump.FindAllSubmatch(data, -1) {
			if string(m[1]) == strconv.Itoa(s.shim) {
				n, _ := strconv.Atoi(string(m[2]))
				counts = append(counts, n)
			}
		}
		return counts
	}
	before := len(dumps())
	if err := syscall.Kill(s.shim, syscall.SIGUSR1); err != nil {
		s.t.Fatal(err)
	}
	var counts []int
	testkit.Eventually(s.t, 10*time.Second, "the shim logged no goroutine dump", func() bool {
		counts = dumps()
		return len(counts) > before
	})
	return counts[len(counts)-1]
}

// usage measures the grouped shim once it is quiet: nothing is being created or deleted.
func (s *soak) usage() shimUsage {
	s.t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.shim))
	if err != nil {
		s.t.Fatalf("the grouped shim: %v", err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.shim))
	if err != nil {
		s.t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`).FindSubmatch(status)
	if m == nil {
		s.t.Fatalf("no VmRSS in /proc/%d/status", s.shim)
	}
	rss, _ := strconv.Atoi(string(m[1]))
	files := map[string]int{}
	for _, fd := range fds {
		target, _ := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", s.shim), fd.Name()))
		if i := strings.Index(target, ":["); i > 0 {
			target = target[:i] // socket:[inode], pipe:[inode]
		}
		files[target]++
	}
	return shimUsage{fds: len(fds), goroutines: s.goroutines(), rssKiB: rss, files: files}
}

// quiet waits until the grouped shim's count of open files has held still for a second: the
// deletes of the last round, answered before their FIFOs and events are done with, are over.
func (s *soak) quiet() {
	s.t.Helper()
	count := func() int {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.shim))
		return len(fds)
	}
	last, since := count(), time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Since(since) < time.Second; {
		if time.Now().After(deadline) {
			s.t.Fatalf("the grouped shim's open files never held still (%d)", last)
		}
		time.Sleep(100 * time.Millisecond)
		if n := count(); n != last {
			last, since = n, time.Now()
		}
	}
}

// zombies lists the zombies among the descendants of pid.
func zombies(pid int) []int {
	var found []int
	for _, c := range testkit.Children(pid) {
		if p, err := driver.ReadProc(c); err == nil && p.State == 'Z' {
			found = append(found, c)
		}
		found = append(found, zombies(c)...)
	}
	return found
}

// within reports whether after is at most 10% above before.
func within(before, after int) bool {
	return float64(after) <= float64(before)*1.10
}

// TestSoak churns containers through one containerd and a grouped shim that serves a set of
// containers throughout, and runs execs in one of them; afterwards the shim holds no more
// files, goroutines or memory than 10% above what it held before the churn, and no zombie is
// left. `make test` runs it short; `make soak` long.
func TestSoak(t *testing.T) {
	t.Parallel()
	counts := soakConfig(t)
	generations := []int{1, 2}
	if os.Getenv("SHIMWALK_SOAK_CONTAINERD") != "" {
		generations = []int{counts.generation}
	}
	for _, g := range generations {
		name := map[int]string{1: "Containerd16", 2: "Containerd2"}[g]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := counts
			c.generation = g
			soakOn(t, c, strings.ToLower(strings.TrimPrefix(name, "Containerd")))
		})
	}
}

// soakOn is the soak on one containerd; tag keeps its names apart from the other's.
func soakOn(t *testing.T, counts soakCounts, tag string) {
	c := testkit.NewContainerd(t, counts.generation, "soak"+tag)
	s := &soak{env: &env{t: t, c: c, shim: testkit.Binary(t, "final/cmd/containerd-shim-shimwalk-v2"),
		rootfs: testkit.Rootfs(t), prefix: "soak" + tag}}
	s.group = "io.containerd.shimwalk.v2.group=" + s.id("pod")
	for i := 0; i < counts.group; i++ {
		s.members = append(s.members, s.id(fmt.Sprintf("member%d", i)))
	}
	s.cleanup(s.members...)
	begin := time.Now()

	// The group: the first container starts the shim, the others join it.
	if errs := parallel(counts.group, 1, func(i int) error {
		_, errOut, code, err := s.ctrQuiet(append(s.runArgs("-d", "--annotation", s.group), s.members[i], "/bin/sleep", "100000")...)
		if err != nil || code != 0 {
			return fmt.Errorf("member %d: exit %d, %v %s", i, code, err, errOut)
		}
		return nil
	}); len(errs) > 0 {
		t.Fatalf("starting the group: %v", errs)
	}
	shims := c.Shims("")
	if len(shims) != 1 {
		t.Fatalf("the group runs on shims %v, want one", shims)
	}
	s.shim = shims[0]

	// A round of everything first, churn and execs at the same time as below: what the shim
	// allocates once and keeps (the Go runtime's pools and stacks, grown to the peak of that
	// concurrency, and its lazily made state) is not a leak.
	if errs := s.round(counts, 2*counts.workers, 2*counts.workers, "warm"); len(errs) > 0 {
		t.Fatalf("warm-up: %v", errs)
	}
	// The dump that counts goroutines allocates too, and memory is read before the dump of its
	// own measurement: two dumps before the first, so that both come after two.
	s.quiet()
	s.goroutines()
	s.goroutines()
	before := s.usage()

	for _, err := range s.round(counts, counts.containers, counts.execs, "c") {
		t.Error(err)
	}
	took := time.Since(begin)

	if now := c.Shims(""); len(now) != 1 || now[0] != s.shim {
		t.Fatalf("shims after the churn: %v, want the group's %d alone", now, s.shim)
	}
	// Delete is answered before every event of it is out; give the shim a moment to be quiet.
	back := func(after shimUsage) bool {
		return within(before.fds, after.fds) && within(before.goroutines, after.goroutines) && within(before.rssKiB, after.rssKiB)
	}
	s.quiet()
	after := s.usage()
	for deadline := time.Now().Add(20 * time.Second); !back(after) && time.Now().Before(deadline); after = s.usage() {
		time.Sleep(time.Second)
	}
	if !back(after) {
		t.Errorf("the grouped shim holds more than 10%% above what it held before the churn: before %v, after %v", before, after)
	}
	t.Logf("soak on containerd %s: %d containers by %d workers, %d execs, a group of %d, in %v", map[int]string{1: "1.6", 2: "2.x"}[counts.generation],
		counts.containers, counts.workers, counts.execs, counts.group, took.Round(time.Second))
	t.Logf("grouped shim %d before the churn: %v", s.shim, before)
	t.Logf("grouped shim %d after the churn:  %v", s.shim, after)
	for f, n := range after.files {
		if n != before.files[f] {
			t.Logf("open %s: %d before, %d after", f, before.files[f], n)
		}
	}
	if z := zombies(s.shim); len(z) > 0 {
		t.Errorf("zombies: %v", z)
	}
	if rc := testkit.RuncContainersAt(t, c.RuncRoot, c.Namespace, ""); len(rc) != counts.group {
		t.Errorf("runc knows %d containers, want the group's %d: %v", len(rc), counts.group, rc)
	}
	state := filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", c.Namespace)
	if entries, _ := os.ReadDir(state); len(entries) != counts.group {
		t.Errorf("%d bundles, want the group's %d", len(entries), counts.group)
	}

	// The group goes, and with its last container the shim.
	if errs := parallel(counts.group, counts.workers, func(i int) error {
		id := s.members[i]
		if _, errOut, code, err := s.ctrQuiet("task", "kill", "-s", "KILL", id); err != nil || code != 0 {
			return fmt.Errorf("kill %s: %v %s", id, err, errOut)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if out, _, _, _ := s.ctrQuiet("task", "ls"); hasRow(out, id, "STOPPED") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s never stopped", id)
			}
		}
		out, errOut, code, err := s.ctrQuiet("task", "delete", id)
		if err != nil || code != 0 || !exitStatus("137").MatchString(out+errOut) {
			return fmt.Errorf("delete %s: exit %d, %q, %v", id, code, out+errOut, err)
		}
		_, _, _, _ = s.ctrQuiet("container", "delete", id)
		return nil
	}); len(errs) > 0 {
		t.Errorf("taking the group down: %v", errs)
	}
	testkit.ExpectGone(t, s.shim, "the grouped shim after its last container")
	s.testNothingLeft(t)
	if left := strings.TrimSpace(strings.Join(c.Leftovers(t, s.members[0], true), " ")); left != "" {
		t.Errorf("left: %s", left)
	}
}
