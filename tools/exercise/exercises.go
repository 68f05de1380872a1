// SPDX-License-Identifier: Apache-2.0

// The workshop's exercises, as data. Each step's README explains an exercise under a heading
// whose GitHub anchor is Anchor; the comment beside each entry is that heading, so whoever edits
// one keeps the other in step (`verify` fails when they part).
package main

// Kind says what the learner does in an exercise.
type Kind string

const (
	// Build: the listed functions lose their bodies and the learner writes them again.
	Build Kind = "build"
	// Break: the tool applies Edit and the learner predicts, then watches, what goes wrong.
	Break Kind = "break"
)

// Exercise is one row of the table. The solution of every exercise is its step, unchanged.
type Exercise struct {
	ID   string // "01.1": step number, dot, index within the step
	Step string // directory under steps/, e.g. "01-bootstrap"
	Kind Kind
	// Title is one line; `list` prints it.
	Title string
	// Funcs (Build) names the functions whose bodies become a panic: "start" for a function,
	// "reaper.Start" for a method, whatever its receiver is (reaper or *reaper), as Go's own
	// documentation names methods. Test files are never touched.
	Funcs []string
	// Edit (Break) is the change to make to the step.
	Edit *Edit
	// Check is the test that shows the exercise done (Build) or the damage (Break): a top-level
	// test function, or "TestA/sub" for one subtest. It is used as-is in -run '^Check$'.
	Check string
	// Hint is one or two sentences that `make` prints.
	Hint string
	// Anchor is the GitHub anchor of the exercise's heading in steps/<Step>/README.md.
	Anchor string
}

// Edit replaces the only occurrence of Old in File (relative to the step directory) with New.
// Old must be unique so that an edit cannot silently land somewhere else as the step changes.
type Edit struct {
	File string
	Old  string
	New  string
}

var exercises = []Exercise{
	{
		// README heading: "### Exercise 01.1: hand the socket over"
		ID:    "01.1",
		Step:  "01-bootstrap",
		Kind:  Build,
		Title: "write start: listen, re-exec the shim with the socket as fd 3, print the address",
		Funcs: []string{"start"},
		Check: "TestStartDaemonizes",
		Hint: "Listen with listen and give the listener's *os.File to the re-executed binary through " +
			"ExtraFiles (it becomes fd 3), in a process group of its own, without waiting for it; then " +
			"write shim.pid and address in the bundle and print the address with writeAddress.",
		Anchor: "exercise-011-hand-the-socket-over",
	},
	{
		// README heading: "### Exercise 01.2: share the caller's process group"
		ID:    "01.2",
		Step:  "01-bootstrap",
		Kind:  Break,
		Title: "start the long-lived shim without Setpgid",
		Edit: &Edit{
			File: "bootstrap.go",
			Old:  "cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}",
			New:  "cmd.SysProcAttr = &syscall.SysProcAttr{}",
		},
		Check: "TestStartDaemonizes",
		Hint: "Predict which assertion of TestStartDaemonizes fails, and what a Ctrl-C in the terminal " +
			"that ran `start` would now do to the shim.",
		Anchor: "exercise-012-share-the-callers-process-group",
	},
	{
		// README heading: "### Exercise 01.3: a socket anyone can connect to"
		ID:    "01.3",
		Step:  "01-bootstrap",
		Kind:  Break,
		Title: "create the socket under a umask of 0",
		Edit: &Edit{
			File: "bootstrap.go",
			Old:  "old := unix.Umask(0o177)",
			New:  "old := unix.Umask(0)",
		},
		Check: "TestSocketPermissions",
		Hint: "Predict the socket's mode, then explain why a chmod to 0600 right after listening " +
			"would still leave a window in which another user could connect.",
		Anchor: "exercise-013-a-socket-anyone-can-connect-to",
	},
}

// lookup returns the exercise with the given id.
func lookup(id string) (Exercise, bool) {
	for _, ex := range exercises {
		if ex.ID == id {
			return ex, true
		}
	}
	return Exercise{}, false
}
