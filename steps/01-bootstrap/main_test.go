// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"testing"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// shimBinary builds the shim of the directory under test once per test run.
func shimBinary(t *testing.T) string {
	t.Helper()
	return testkit.StepBinary(t)
}
