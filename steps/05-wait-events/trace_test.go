// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTracePoint: without SHIMWALK_TRACE nothing is written; with it, each point is one JSON
// line of what shimctl's trace reader needs (a kind, a wall-clock time, a participant).
func TestTracePoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	old := traceDest
	t.Cleanup(func() { traceDest = old })

	traceDest = ""
	tracePoint("helper", "", false, "not traced")
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a point without SHIMWALK_TRACE touched a file: %v", err)
	}

	traceDest = path
	before := time.Now()
	tracePoint("helper", "shim", false, "re-exec: listener as fd %d", 3)
	tracePoint("reaper", "shim", true, "exited 3 (no format args: %d stays)")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("trace file:\n%s\nwant two lines", data)
	}
	var p struct {
		Time        time.Time `json:"time"`
		Kind        string    `json:"kind"`
		Participant string    `json:"participant"`
		To          string    `json:"to"`
		Name        string    `json:"name"`
		Async       bool      `json:"async"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &p); err != nil {
		t.Fatal(err)
	}
	if p.Kind != "point" || p.Participant != "helper" || p.To != "shim" || p.Name != "re-exec: listener as fd 3" ||
		p.Async || p.Time.Before(before) {
		t.Errorf("first point: %+v", p)
	}
	if err := json.Unmarshal([]byte(lines[1]), &p); err != nil {
		t.Fatal(err)
	}
	if !p.Async || p.Name != "exited 3 (no format args: %d stays)" {
		t.Errorf("second point: %+v", p)
	}
}
