// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"

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

// TestStdinOutlivesItsClients: the end of a client's writing is not the end of the process's
// input. As with containerd's shim, a client that closes its end of the stdin FIFO (a
// detached ctr, a CRI attach that ends) leaves the input open for the next one; CloseIO ends
// it.
func TestStdinOutlivesItsClients(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "stdin-clients", testkit.TaskOptions{Args: []string{"cat"}, StdinFIFO: true})
	k.Run()
	for _, line := range []string{"first\n", "second\n"} {
		w, err := k.FIFOs.OpenStdin(k.Ctx())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, line); err != nil {
			t.Fatal(err)
		}
		w.Close()
		testkit.Eventually(t, 10*time.Second, "cat did not echo "+strings.TrimSpace(line), func() bool {
			return strings.HasSuffix(k.Stdout.String(), line)
		})
	}
	if st := k.State(); st.Status != task.Status_RUNNING {
		t.Fatalf("after two clients came and went, cat is %v: its input ended without CloseIO", st.Status)
	}
	if _, err := k.Conn.Task.CloseIO(k.Ctx(), &taskapi.CloseIORequest{ID: k.ID, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	if st := k.WaitStatus(task.Status_STOPPED, 10*time.Second); st.ExitStatus != 0 {
		t.Errorf("cat exited %d after CloseIO, want 0", st.ExitStatus)
	}
	if got := k.Stdout.String(); got != "first\nsecond\n" {
		t.Errorf("stdout %q", got)
	}
}

// TestStdinNobodyOpensHoldsNoThread: a stdin FIFO that no client ever opens (a detached
// `ctr run -d` leaves one) costs the shim no thread waiting in open(2) for a writer.
func TestStdinNobodyOpensHoldsNoThread(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "stdin-nobody", testkit.TaskOptions{Args: []string{"sleep", "60"}, StdinFIFO: true})
	k.Run()
	k.WaitStatus(task.Status_RUNNING, 10*time.Second)
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", k.ShimPid))
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, tid := range tasks {
		wchan, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", k.ShimPid, tid.Name()))
		if err != nil {
			continue // the thread ended
		}
		if string(wchan) == "0" {
			continue // running: no symbol
		}
		read++
		if string(wchan) == "wait_for_partner" {
			t.Errorf("shim thread %s waits in the open of a FIFO", tid.Name())
		}
	}
	if read == 0 {
		t.Fatal("no wait channel of the shim's threads could be read: the check says nothing")
	}
}
