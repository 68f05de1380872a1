// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ExitRecord is a bundle's exit.json, as the step 06 shim and the final shim write it when a
// container's init exits.
type ExitRecord struct {
	Pid        int       `json:"pid"`
	ExitStatus int       `json:"exit_status"`
	ExitedAt   time.Time `json:"exited_at"`
}

// WaitExitRecord waits for bundle/exit.json and returns it; every field must be present.
func WaitExitRecord(t testing.TB, bundle string) ExitRecord {
	t.Helper()
	path := filepath.Join(bundle, "exit.json")
	Eventually(t, 20*time.Second, "exit.json never written in "+bundle, func() bool {
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
	var r ExitRecord
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("exit.json %q: %v", data, err)
	}
	return r
}
