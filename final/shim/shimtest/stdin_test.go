// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"strings"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// TestStdinThroughCat sends more than a pipe holds through the container's stdin and back out
// of its stdout: every byte must arrive, in order, and the end of stdin must reach the
// container, or cat would never exit and its output never close.
func TestStdinThroughCat(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	var in strings.Builder
	for i := 0; in.Len() < 300<<10; i++ {
		in.WriteString(strings.Repeat(string(rune('a'+i%26)), i%97) + "\n")
	}
	k := testkit.NewTask(t, d, "cat", testkit.TaskOptions{Args: []string{"cat"}, Stdin: in.String()})
	k.Run()
	k.WaitOutput(30 * time.Second)
	if got := k.Stdout.String(); got != in.String() {
		t.Errorf("stdout has %d bytes, want the %d of stdin back, in order", len(got), in.Len())
	}
}
