// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// testPodPidNamespace is a Kubernetes pod with shareProcessNamespace, as ctr can make one: a
// container joins the PID namespace of a pause container, and its init forks a child. When the
// init is killed the child is reparented to the pause container's init, holding the
// container's stdout and stderr, and CRI, which waits for the end of that output before it
// deletes the task, would wait for good. The shim kills what the init left before it reports
// the exit: by the time containerd sees the task STOPPED, the child is dead.
func (e *env) testPodPidNamespace(t *testing.T) {
	e = e.sub(t)
	pause, app := e.id("pod-pause"), e.id("pod-app")
	e.cleanup(app, pause)
	e.runDetached(pause, nil, "/bin/sleep", "100")
	ns := fmt.Sprintf("pid:/proc/%d/ns/pid", e.initPid(pause))
	e.runDetached(app, []string{"--with-ns", ns}, "/bin/sh", "-c", "sleep 300 & exec sleep 301")
	initPid := e.initPid(app)
	if spec, err := os.ReadFile(filepath.Join(e.c.Bundle(app), bundle.ConfigFile)); err != nil || !strings.Contains(string(spec), `"path":"`+ns[len("pid:"):]+`"`) {
		t.Fatalf("the container did not join the pause container's PID namespace: %v\n%s", err, spec)
	}
	var child int
	testkit.Eventually(t, 10*time.Second, "ctr task ps never listed the init's child", func() bool {
		for _, m := range regexp.MustCompile(`(?m)^\s*(\d+)\s`).FindAllStringSubmatch(e.ctr("task", "ps", app).Stdout, -1) {
			if pid, _ := strconv.Atoi(m[1]); pid != initPid {
				child = pid
			}
		}
		return child != 0
	})
	// As the OOM killer would. Not through containerd: runc kill may take the whole cgroup
	// down by itself, and the shim must not depend on how the init died.
	if err := syscall.Kill(initPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(app, "STOPPED")
	// Killed: gone, or a zombie of the pause container's sleep, which reaps nobody. The task
	// is not deleted: runc delete would kill the child too, but CRI never gets that far.
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("the task is STOPPED and the init's child %d lives on", child), func() bool {
		p, err := driver.ReadProc(child)
		return err != nil || p.State == 'Z'
	})
	e.waitStatus(pause, "RUNNING")
}
