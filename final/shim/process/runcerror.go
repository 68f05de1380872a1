// SPDX-License-Identifier: Apache-2.0

// What runc says when it fails: the last error it logged during the failed call, and which
// failures mean the container or process is gone, as containerd v2.4's runc shim reads them in
// process.(*Init).runtimeError (process/init.go), getLastRuntimeError and checkKillError
// (process/utils.go).

package process

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/containerd/errdefs"
)

// runtimeError prefers runc's own last error message, from its JSON log, to the bare exit
// status go-runc reports: `exec: "nosuch": executable file not found in $PATH` says more
// than "exit status 1". Only what the failed call wrote counts, from mark (logEnd before the
// call) on: the log keeps every earlier call's errors, which say nothing about this one.
func (p *Init) runtimeError(err error, op string, mark int64) error {
	return runcFailure(op, lastRuncError(p.runtime.Log, mark), err)
}

// runcFailure is the error of runc op that failed with err after logging msg: msg when the call
// logged one, else err, which says at least how runc ended (a runc killed logs nothing).
func runcFailure(op, msg string, err error) error {
	if msg != "" {
		return fmt.Errorf("runc %s: %s", op, msg)
	}
	return fmt.Errorf("runc %s: %w", op, err)
}

// killError is NotFound only when runc says there is nothing left to signal: callers take
// NotFound from Kill for "already gone" and stop trying, so a runc that failed, hung or was
// killed must not be reported that way (containerd's checkKillError draws the same line).
// Only this call's own output decides: Kill runs alongside the other runc calls, so even the
// lines log.json gained during it may be another call's "container not running".
func (p *Init) killError(err error, mark int64) error {
	rerr := p.runtimeError(err, "kill", mark)
	if missingIn(err.Error()) != nothingMissing {
		return fmt.Errorf("%w: %w", rerr, errdefs.ErrNotFound)
	}
	return rerr
}

// notExist reports whether the runc call that failed with err, after mark, said it does not
// know the container: a container deleted behind the shim's back is as deleted as can be.
func (p *Init) notExist(err error, mark int64) bool {
	return missingIn(err.Error(), lastRuncError(p.runtime.Log, mark)) == containerMissing
}

// missing is what a failed runc call says is not there.
type missing uint8

const (
	nothingMissing   missing = iota // the failure is another one, or says nothing
	processMissing                  // the container is there, the process to signal is not
	containerMissing                // the runtime does not know the container
)

// Phrases of runc and crun's messages, lower case. Only runc's own words are taken for a
// missing container, as containerd's runc shim takes them (process.Init.delete,
// checkKillError): crun's ("error opening file `<root>/<id>/status`: No such file or
// directory", "cannot open directory '<root>/<id>': ...") name a missing file, which may be
// another one than the container's state.
var (
	containerGone = []string{"does not exist"}
	processGone   = []string{"container not running", "no such process", "process already finished"}
)

// missingIn is what the texts of a failed runc call (go-runc's error, which holds what runc
// wrote to stderr, and the message runc logged) say is missing. A missing container wins:
// the process of a container that is gone is gone too.
func missingIn(texts ...string) missing {
	msg := strings.ToLower(strings.Join(texts, "\n"))
	for _, phrase := range containerGone {
		if strings.Contains(msg, phrase) {
			return containerMissing
		}
	}
	for _, phrase := range processGone {
		if strings.Contains(msg, phrase) {
			return processMissing
		}
	}
	return nothingMissing
}

// logEnd is the size of runc's log: where the next call's lines will begin.
func logEnd(logPath string) int64 {
	st, err := os.Stat(logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// lastRuncError is the message of the last error runc logged at logPath from offset from on.
func lastRuncError(logPath string, from int64) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	var msg string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &entry) == nil && (entry.Level == "error" || entry.Level == "fatal") {
			msg = entry.Msg
		}
	}
	return strings.TrimSpace(msg)
}
