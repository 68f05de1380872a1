// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// shimBinary builds the shim of the directory under test once per test run.
func shimBinary(t *testing.T) string {
	t.Helper()
	return testkit.StepBinary(t)
}

// dial connects to the shim at b's address; the connection is closed when the test ends.
func dial(t *testing.T, b driver.Bootstrap) *driver.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := driver.Dial(ctx, b.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// shimPidAt asks the process serving b's address for its pid, with the Connect RPC.
func shimPidAt(t *testing.T, b driver.Bootstrap) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := dial(t, b).Task.Connect(ctx, &taskapi.ConnectRequest{})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return int(resp.ShimPid)
}
