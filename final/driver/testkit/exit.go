// SPDX-License-Identifier: Apache-2.0

// Waiting for the exit record (exit.json) a shim writes when a container's init exits, and
// checking it has every field. Not a mirror of any containerd function: containerd's runc shim
// keeps the exit in memory only; the record is shimwalk's, for the delete action after a shim
// died.

package testkit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// WaitExitRecord waits for dir/exit.json, as the step 06 shim and the final shim write it when
// a container's init exits, and returns it; every field must be present.
func WaitExitRecord(t testing.TB, dir string) bundle.ExitRecord {
	t.Helper()
	path := filepath.Join(dir, bundle.ExitFile)
	Eventually(t, 20*time.Second, "exit.json never written in "+dir, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatalf("exit.json %q: %v", data, err)
	}
	for _, name := range []string{"pid", "exit_status", "exited_at"} {
		if _, ok := fields[name]; !ok {
			t.Errorf("exit.json %s has no %s", data, name)
		}
	}
	var r bundle.ExitRecord
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("exit.json %q: %v", data, err)
	}
	return r
}
