// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"errors"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// schedCookie is pid's core-scheduling cookie; unsupported when the kernel has no core
// scheduling (EINVAL).
func schedCookie(t *testing.T, pid int) (cookie uint64, supported bool) {
	t.Helper()
	const pidtypePid = 0
	err := unix.Prctl(unix.PR_SCHED_CORE, unix.PR_SCHED_CORE_GET, uintptr(pid), pidtypePid, uintptr(unsafe.Pointer(&cookie)))
	if errors.Is(err, unix.EINVAL) {
		return 0, false
	}
	if err != nil {
		t.Fatalf("PR_SCHED_CORE_GET of %d: %v", pid, err)
	}
	return cookie, true
}

// TestStartHonoursSchedCore: with SCHED_CORE in its environment, the start action gives the
// shim it starts a core-scheduling cookie of its own, as containerd's runc shim does; on a
// kernel without core scheduling the start fails with the reason, as the reference's does.
func TestStartHonoursSchedCore(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	// The cookie is made for the start action's process group: containerd gives it its own.
	c.ownGroup = true
	r := c.run(nil, []string{"SCHED_CORE=1"}, c.args("schedcore", "start")...)
	if _, supported := schedCookie(t, os.Getpid()); !supported {
		if r.Code == 0 || !strings.Contains(r.Stderr, "sched core") {
			t.Errorf("start with SCHED_CORE on a kernel without core scheduling: exit %d, stderr %q; want the failure", r.Code, r.Stderr)
		}
		if r.Code == 0 {
			c.started(r) // shut down and checked when the test ends
		}
		return
	}
	_, pid := c.started(r)
	mine, _ := schedCookie(t, os.Getpid())
	if shim, _ := schedCookie(t, pid); shim == 0 || shim == mine {
		t.Errorf("the shim's core-scheduling cookie is %#x (the test's is %#x): want one of its own", shim, mine)
	}
}
