// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"testing"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// shimBinary builds the shim of the directory under test once per test run.
func shimBinary(t *testing.T) string {
	t.Helper()
	return testkit.StepBinary(t)
}

// shimPidAt asks the process serving b's address for its pid: in this step, from its greeting.
func shimPidAt(t *testing.T, b driver.Bootstrap) int {
	t.Helper()
	return greet(t, b).Pid
}
