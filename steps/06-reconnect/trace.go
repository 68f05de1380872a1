// SPDX-License-Identifier: Apache-2.0

// Trace points for the walkthrough's diagrams (since step 01): when SHIMWALK_TRACE names a file
// (shimctl --trace hands the shim its own), each point is appended to it as one JSON line with
// the wall-clock time, which shimctl merges with what it saw itself. containerd's runc shim has
// no such thing; its nearest relative in containerd v2.4 is the debug logging of pkg/shim/shim.go
// (log.G).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// traceDest is read once: the long-lived shim inherits the helper's environment.
var traceDest = os.Getenv("SHIMWALK_TRACE")

// tracePoint records that participant did what (a fmt format and its args), as a message to
// `to` when it is not empty; async marks a message that its receiver handles later (an exit
// queued for the service). With tracing off it costs a string compare: the text is not even
// formatted. Tracing never fails the shim: a point that cannot be written is dropped.
func tracePoint(participant, to string, async bool, what string, args ...any) {
	if traceDest == "" {
		return
	}
	if len(args) > 0 {
		what = fmt.Sprintf(what, args...)
	}
	data, err := json.Marshal(struct {
		Time        time.Time `json:"time"`
		Kind        string    `json:"kind"`
		Participant string    `json:"participant"`
		To          string    `json:"to,omitempty"`
		Name        string    `json:"name"`
		Async       bool      `json:"async,omitempty"`
	}{time.Now(), "point", participant, to, what, async})
	if err != nil {
		return
	}
	// One write of a whole line to a file opened O_APPEND keeps lines whole while shimctl and
	// other shim processes append to the same file.
	f, err := os.OpenFile(traceDest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	_, _ = f.Write(append(data, '\n'))
	_ = f.Close()
}
