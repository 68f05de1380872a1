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
	{
		// README heading: "### Exercise 02.1: answer Connect and State"
		ID:    "02.1",
		Step:  "02-ttrpc",
		Kind:  Build,
		Title: "write Connect, State and checkID: the first RPCs a caller makes",
		Funcs: []string{"service.Connect", "service.State", "service.checkID"},
		Check: "TestConnectAndState",
		Hint: "Connect answers with the shim's own pid and a version string. checkID tells an empty id " +
			"(InvalidArgument) from someone else's (NotFound); State checks the id, then says NotFound " +
			"because nothing has been created yet. Errors are status.Error values with codes.",
		Anchor: "exercise-021-answer-connect-and-state",
	},
	{
		// README heading: "### Exercise 02.2: serve the Task service on fd 3"
		ID:    "02.2",
		Step:  "02-ttrpc",
		Kind:  Build,
		Title: "write serve: a ttrpc server on the inherited listener, stopped by a signal or Shutdown",
		Funcs: []string{"serve"},
		Check: "TestShutdown",
		Hint: "Open the log, take the listener from inheritedListener, build a ttrpc server with the " +
			"same-user handshaker and s.intercept, register the service, run Serve in a goroutine, then " +
			"wait for SIGTERM/SIGINT or the cancel that Shutdown calls; shut the server down with a grace " +
			"period and remove the socket file.",
		Anchor: "exercise-022-serve-the-task-service-on-fd-3",
	},
	{
		// README heading: "### Exercise 02.3: let any local user in"
		ID:    "02.3",
		Step:  "02-ttrpc",
		Kind:  Break,
		Title: "serve without the peer-credential handshaker",
		Edit: &Edit{
			File: "service.go",
			Old:  "ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser()),",
			New:  "// ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser()),",
		},
		Check: "TestOtherUserIsRefused",
		Hint: "The test loosens the socket's file modes on purpose. Predict what user nobody gets from " +
			"Connect once only the file modes stood in its way, and what it could then call.",
		Anchor: "exercise-023-let-any-local-user-in",
	},
	{
		// README heading: "### Exercise 02.4: a Shutdown that only says yes"
		ID:    "02.4",
		Step:  "02-ttrpc",
		Kind:  Break,
		Title: "answer Shutdown without stopping the server",
		Edit: &Edit{
			File: "service.go",
			Old:  "\ts.shutdown()\n",
			New:  "\t// s.shutdown()\n",
		},
		Check: "TestShutdown",
		Hint: "Predict what the caller sees (the reply) and what it does not (the process), then which " +
			"of TestShutdown's two checks fails and why the socket file outlives the shim.",
		Anchor: "exercise-024-a-shutdown-that-only-says-yes",
	},
	{
		// README heading: "### Exercise 03.1: create the container"
		ID:    "03.1",
		Step:  "03-runc-create",
		Kind:  Build,
		Title: "write createInit: mount the rootfs, wire stdio, runc create with a pid file",
		Funcs: []string{"createInit"},
		Check: "TestOverlayRootfs",
		Hint: "Mount r.Rootfs on <bundle>/rootfs with mountRootfs when there are mounts, make the pipes " +
			"with newStdio, run p.runtime.Create with a PidFile in the bundle, read the pid back; on " +
			"any failure undo what was done (runc delete --force, close stdio, unmountAll).",
		Anchor: "exercise-031-create-the-container",
	},
	{
		// README heading: "### Exercise 03.2: pipes for runc, FIFOs for containerd"
		ID:    "03.2",
		Step:  "03-runc-create",
		Kind:  Build,
		Title: "write newStdio: pipes for runc, copied into the FIFOs named in the request",
		Funcs: []string{"newStdio"},
		Check: "TestOutputReachesFIFOs",
		Hint: "runc.NewPipeIO makes the pipes; open each output FIFO read-write so the open cannot " +
			"block, and copy pipe to FIFO in a goroutine counted in s.wg that closes the FIFO at EOF. " +
			"No paths at all means runc.NewNullIO.",
		Anchor: "exercise-032-pipes-for-runc-fifos-for-containerd",
	},
	{
		// README heading: "### Exercise 03.3: keep the container's ends of the pipes"
		ID:    "03.3",
		Step:  "03-runc-create",
		Kind:  Break,
		Title: "CloseAfterStart that closes nothing",
		Edit: &Edit{
			File: "stdio.go",
			Old: "\tif c, ok := s.IO.(runc.StartCloser); ok {\n" +
				"\t\treturn c.CloseAfterStart()\n" +
				"\t}\n" +
				"\treturn nil\n",
			New: "\treturn nil\n",
		},
		Check: "TestOutputReachesFIFOs",
		Hint: "The container prints and exits. Predict whether its output arrives, and whether the " +
			"reader ever sees the end of it: who else still holds the write end of each pipe?",
		Anchor: "exercise-033-keep-the-containers-ends-of-the-pipes",
	},
	{
		// README heading: "### Exercise 03.4: exit status 1 and nothing more"
		ID:    "03.4",
		Step:  "03-runc-create",
		Kind:  Break,
		Title: "report runc's exit status instead of its logged error",
		Edit: &Edit{
			File: "runc.go",
			Old: "\tif msg := lastRuncError(p.runtime.Log); msg != \"\" {\n" +
				"\t\treturn fmt.Errorf(\"%s: %s\", what, msg)\n" +
				"\t}\n",
			New: "",
		},
		Check: "TestCreateFailureCarriesRuncsMessage",
		Hint: "Predict the message containerd (and ctr) would show for a container whose command does " +
			"not exist, then find where runc wrote the real reason in the bundle.",
		Anchor: "exercise-034-exit-status-1-and-nothing-more",
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
