// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

type hello struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Pid       int    `json:"pid"`
}

// greet reads the one JSON line the long-lived shim of this step writes on every connection.
func greet(t *testing.T, b driver.Bootstrap) hello {
	t.Helper()
	conn, err := net.DialTimeout("unix", b.SocketPath(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial shim: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		t.Fatalf("read greeting: %v", err)
	}
	var h hello
	if err := json.Unmarshal(line, &h); err != nil {
		t.Fatalf("greeting %q: %v", line, err)
	}
	return h
}

func TestGreeting(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, pid := startShim(t, d, "hello")
	for i := 0; i < 3; i++ { // every connection gets the same answer
		if got := greet(t, b); got != (hello{"hello", "test", pid}) {
			t.Errorf("greeting = %+v, want id hello, namespace test, pid %d", got, pid)
		}
	}
}

// TestAcceptBacksOff: when Accept keeps failing (the shim is out of file descriptors), the loop
// waits longer after each failure instead of spinning, and serves again once the cause is gone.
func TestAcceptBacksOff(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	b, pid := startShim(t, d, "emfile")
	greet(t, b) // serving, with its log and listener open
	// No descriptor may be opened: every Accept fails with EMFILE.
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 0, Max: old.Max}, nil); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("unix", b.SocketPath(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The fourth failure waits 40 ms: three before it waited 5, 10 and 20.
	log := filepath.Join(d.Bundle("emfile"), "shim.log")
	var lines []string
	testkit.Eventually(t, 20*time.Second, "the accept loop never backed off to 40ms", func() bool {
		data, _ := os.ReadFile(log)
		lines = strings.Split(string(data), "\n")
		return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "retry_in=40ms") })
	})
	failures := 0
	for _, l := range lines {
		if strings.Contains(l, "msg=accept") {
			failures++
		}
		if strings.Contains(l, "retry_in=40ms") {
			break
		}
	}
	if failures != 4 {
		t.Errorf("%d failed accepts up to the 40ms wait, want 4 (5, 10, 20, 40ms)", failures)
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := bufio.NewReader(conn).ReadBytes('\n'); err != nil {
		t.Errorf("no greeting once descriptors were free again: %v", err)
	}
}
