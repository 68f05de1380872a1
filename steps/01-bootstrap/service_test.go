// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"net"
	"testing"
	"time"

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
	b, pid, _ := startShim(t, d, "hello")
	for i := 0; i < 3; i++ { // every connection gets the same answer
		if got := greet(t, b); got != (hello{"hello", "test", pid}) {
			t.Errorf("greeting = %+v, want id hello, namespace test, pid %d", got, pid)
		}
	}
}
