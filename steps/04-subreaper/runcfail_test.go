// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// faultyTask is a running task whose shim drives a runc the test can make fail.
func faultyTask(t *testing.T, id string) (*testkit.Task, *testkit.FaultyRunc) {
	t.Helper()
	f := testkit.NewFaultyRunc(t)
	d := testkit.NewDriver(t, shimBinary(t))
	d.Env = append(d.Env, "SHIMWALK_RUNC="+f.Path)
	k := testkit.NewTask(t, d, id, testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	return k, f
}

// TestFailedKillIsNotNotFound: a runc kill that fails or dies has not found the container gone.
// NotFound would tell the caller to stop trying while the container runs on. And runc's log,
// which still holds the first failure's line, must not explain the second, silent one.
func TestFailedKillIsNotNotFound(t *testing.T) {
	t.Parallel()
	k, f := faultyTask(t, "killfail")
	for _, fault := range []testkit.Fault{testkit.Fail, testkit.Die} {
		f.Set(t, "kill", fault)
		_, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9})
		if err == nil || driver.Code(err) == codes.NotFound {
			t.Errorf("Kill with a runc that meets %q: %v, want an error other than NotFound", fault, err)
		}
		if fault == testkit.Die && strings.Contains(driver.Message(err), "failing on purpose") {
			t.Errorf("Kill with a runc killed mid-call reports an earlier call's error: %q", driver.Message(err))
		}
	}
	f.Clear(t, "kill")
	if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatalf("Kill once runc works again: %v", err)
	}
	// Once the container is gone, runc says so, and that is NotFound.
	testkit.Eventually(t, 20*time.Second, "a Kill after the exit never answered NotFound", func() bool {
		_, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9})
		return driver.Code(err) == codes.NotFound
	})
}
