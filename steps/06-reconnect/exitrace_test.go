// SPDX-License-Identifier: Apache-2.0

package main

import (
	"path/filepath"
	"testing"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// stoppedTooSoonRunc is runc, except that state reports a running container as stopped and a
// delete forces: it holds open the moment between the init's death, which runc sees at once,
// and the reap loop's record of it.
const stoppedTooSoonRunc = `#!/bin/sh
sub=
for a; do case "$a" in state|delete) sub=$a; break;; esac; done
case "$sub" in
state) out=$(runc "$@") || exit $?; printf '%s\n' "$out" | sed 's/"running"/"stopped"/'; exit 0;;
delete)
	for a; do
		shift
		if [ "$a" = delete ]; then set -- "$@" delete --force; else set -- "$@" "$a"; fi
	done;;
esac
exec runc "$@"
`

// TestDeleteBeforeTheExitIsRecorded: when runc already says "stopped" but the reap loop has not
// recorded the exit, Delete must not take the task for one that never ran and report 255: from
// this step on it waits for the exit and reports it (137 here: the wrapper's delete killed it).
func TestDeleteBeforeTheExitIsRecorded(t *testing.T) {
	t.Parallel()
	wrapper := filepath.Join(testkit.TempDir(t), "runc")
	testkit.WriteExecutable(t, wrapper, []byte(stoppedTooSoonRunc))
	d := testkit.NewDriver(t, shimBinary(t))
	d.Env = append(d.Env, "SHIMWALK_RUNC="+wrapper)
	k := testkit.NewTask(t, d, "early", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()

	resp, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
	if err != nil {
		t.Fatal(err)
	}
	if int(resp.Pid) != pid || resp.ExitStatus != 137 {
		t.Errorf("Delete = pid %d status %d; want %d, 137", resp.Pid, resp.ExitStatus, pid)
	}
}
