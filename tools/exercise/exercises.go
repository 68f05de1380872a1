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
	// Anchor is the GitHub anchor of the exercise's heading in its page.
	Anchor string
	// Page is the Markdown file, relative to the repository root, that holds the exercise's
	// heading; empty means steps/<Step>/README.md.
	Page string
	// Lib, when set, is a package of the repository, such as "final/driver", whose functions
	// Funcs names (Build) or whose file Edit changes (Break) instead of the step's. The copy
	// holds that package's files, and Check runs with the copy laid over the package (go test
	// -overlay, and GOFLAGS for the binaries the tests build): the tests then drive the
	// learner's version of the library, and nothing in the repository changes.
	Lib string
	// Tests, when set, is the package, relative to the repository root, whose tests hold Check,
	// such as "final/shim/shimtest" for an exercise on the final shim; empty means the step's.
	Tests string
}

// testDir is the package, relative to the repository root, whose tests hold the check.
func (ex Exercise) testDir() string {
	if ex.Tests != "" {
		return ex.Tests
	}
	return "steps/" + ex.Step
}

// page is the Markdown file, relative to the repository root, holding the exercise's heading.
func (ex Exercise) page() string {
	if ex.Page != "" {
		return ex.Page
	}
	return "steps/" + ex.Step + "/README.md"
}

// source is the directory, relative to the repository root, that the exercise copies.
func (ex Exercise) source() string {
	if ex.Lib != "" {
		return ex.Lib
	}
	return "steps/" + ex.Step
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
		// README heading: "### Exercise 01.4: a reply that never ends"
		ID:    "01.4",
		Step:  "01-bootstrap",
		Kind:  Break,
		Title: "let the long-lived shim inherit the helper's stdout",
		Edit: &Edit{
			File: "bootstrap.go",
			Old:  "\tcmd.ExtraFiles = []*os.File{f}\n",
			New:  "\tcmd.ExtraFiles = []*os.File{f}\n\tcmd.Stdout = os.Stdout // the shim writes its own messages there\n",
		},
		Check: "TestStartDaemonizes",
		Hint: "The helper still prints the address and exits at once. Predict when the caller, which " +
			"reads the helper's stdout until it ends, gets its reply, and what containerd does meanwhile.",
		Anchor: "exercise-014-a-reply-that-never-ends",
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
			"wait for SIGTERM/SIGINT or the cancel that Shutdown calls; after a Shutdown let its caller " +
			"hang up first (callers.waitHangUp, with callers.handshaker around the credential check), " +
			"then shut the server down with a grace period and remove the socket file.",
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
			Old:  "ttrpc.WithServerHandshaker(callers.handshaker(ttrpc.UnixSocketRequireSameUser())),",
			New:  "// ttrpc.WithServerHandshaker(callers.handshaker(ttrpc.UnixSocketRequireSameUser())),",
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
			Old: "\tif msg := lastRuncError(p.runtime.Log, mark); msg != \"\" {\n" +
				"\t\treturn fmt.Errorf(\"%s: %s\", what, msg)\n" +
				"\t}\n",
			New: "",
		},
		Check: "TestCreateFailureCarriesRuncsMessage",
		Hint: "Predict the message containerd (and ctr) would show for a container whose command does " +
			"not exist, then find where runc wrote the real reason in the bundle.",
		Anchor: "exercise-034-exit-status-1-and-nothing-more",
	},
	{
		// README heading: "### Exercise 04.1: a shim that adopts nothing"
		ID:    "04.1",
		Step:  "04-subreaper",
		Kind:  Break,
		Title: "never become a child subreaper",
		Edit: &Edit{
			File: "reaper.go",
			Old:  "\tif err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {\n",
			New:  "\tif err := error(nil); err != nil { // was: unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)\n",
		},
		Check: "TestContainerIsTheShimsChild",
		Hint: "Predict who becomes the container's parent when runc create exits, what State reports " +
			"after a kill (the reap loop runs, but never sees the exit), and what Delete reports.",
		Anchor: "exercise-041-a-shim-that-adopts-nothing",
	},
	{
		// README heading: "### Exercise 04.2: reap until nothing is left"
		ID:    "04.2",
		Step:  "04-subreaper",
		Kind:  Build,
		Title: "write reap and exitStatus: wait4(-1, WNOHANG) until no child is left, 128+signal",
		Funcs: []string{"reaper.reap", "exitStatus"},
		Check: "TestExitStatusIsCollected",
		Hint: "Loop on unix.Wait4(-1, &ws, unix.WNOHANG, nil): retry on EINTR, stop on an error or pid 0. " +
			"Under r.mu, a pid found in r.waiting is a runc command: send its exit on that channel; any " +
			"other exit goes to every subscriber's queue, pushed after r.mu is released. exitStatus is the " +
			"exit code, or 128 plus the signal for a killed process.",
		Anchor: "exercise-042-reap-until-nothing-is-left",
	},
	{
		// README heading: "### Exercise 04.3: killed is not an exit code"
		ID:    "04.3",
		Step:  "04-subreaper",
		Kind:  Break,
		Title: "report ws.ExitStatus() for a killed process too",
		Edit: &Edit{
			File: "reaper.go",
			Old:  "\tif ws.Signaled() {\n\t\treturn 128 + int(ws.Signal())\n\t}\n",
			New:  "",
		},
		Check: "TestExitStatusIsCollected",
		Hint: "Predict which of the two subtests fails, and the number State reports for a container " +
			"killed with SIGKILL: what does WaitStatus.ExitStatus return for a process that did not exit?",
		Anchor: "exercise-043-killed-is-not-an-exit-code",
	},
	{
		// README heading: "### Exercise 04.4: a monitor for runc's own exits"
		ID:    "04.4",
		Step:  "04-subreaper",
		Kind:  Build,
		Title: "write the reaper's go-runc monitor: Start, StartLocked and Wait",
		Funcs: []string{"reaper.Start", "reaper.StartLocked", "reaper.Wait"},
		Check: "TestRuncExitsReapedFirst",
		Hint: "Start forks the command (with r.fork, c.Start plus the test hook) while holding r.mu and " +
			"records its pid in r.waiting with a buffered channel, so that reap cannot look the pid up " +
			"before it is there. StartLocked does " +
			"the same from a goroutine locked to its OS thread until the exit arrives. Wait receives the " +
			"exit from the channel, then calls c.Wait only to finish the command's I/O.",
		Anchor: "exercise-044-a-monitor-for-runcs-own-exits",
	},
	{
		// README heading: "### Exercise 05.1: one close wakes every waiter"
		ID:    "05.1",
		Step:  "05-wait-events",
		Kind:  Build,
		Title: "write Wait: block on the process's done channel or the caller's context",
		Funcs: []string{"service.Wait"},
		Check: "TestWaitWakesEveryWaiter",
		Hint: "Find the process as the other RPCs do, then select on p.done and ctx.Done(); a cancelled " +
			"context is status.FromContextError(ctx.Err()). Once done is closed, the exit is recorded: " +
			"read it with s.exitOf and answer its status and time.",
		Anchor: "exercise-051-one-close-wakes-every-waiter",
	},
	{
		// README heading: "### Exercise 05.2: an exit before its start"
		ID:    "05.2",
		Step:  "05-wait-events",
		Kind:  Break,
		Title: "start without holding back early exits",
		Edit: &Edit{
			File: "service.go",
			Old:  "\ts.starting[h] = struct{}{}\n",
			New:  "\t// s.starting[h] = struct{}{}\n",
		},
		Check: "TestEarlyExitComesAfterStart",
		Hint: "Predict the order of the four events for a container running /bin/true, and whether Wait " +
			"still returns. Which of the two, Start's reply or the reap loop, reaches the service first?",
		Anchor: "exercise-052-an-exit-before-its-start",
	},
	{
		// README heading: "### Exercise 05.3: waiters that never wake"
		ID:    "05.3",
		Step:  "05-wait-events",
		Kind:  Break,
		Title: "record the exit without closing the done channel",
		Edit: &Edit{
			File: "runc.go",
			Old:  "\tclose(p.done)\n",
			New:  "\t// close(p.done)\n",
		},
		Check: "TestWaitWakesEveryWaiter",
		Hint: "State and Delete still see the exit. Predict what the ten waiters see, and what a Wait " +
			"called after the exit does.",
		Anchor: "exercise-053-waiters-that-never-wake",
	},
	{
		// README heading: "### Exercise 05.4: forward events in order"
		ID:    "05.4",
		Step:  "05-wait-events",
		Kind:  Build,
		Title: "write the publisher's loop: forward the queue in order, retry a few times, then drop",
		Funcs: []string{"publisher.run"},
		Check: "TestLifecycleEvents",
		Hint: "Take the oldest envelope under p.mu without removing it; with the mutex released, dial " +
			"(p.dial) if there is no client and forward (p.forward); on failure close the client and " +
			"retry after a growing pause, at most maxAttempts times; then remove it from the queue. " +
			"Sleep on p.ready when the queue is empty, and return once it is empty and closed, or when " +
			"p.ctx ends.",
		Anchor: "exercise-054-forward-events-in-order",
	},
	{
		// README heading: "### Exercise 06.1: an exit that dies with its shim"
		ID:    "06.1",
		Step:  "06-reconnect",
		Kind:  Break,
		Title: "publish TaskExit without writing exit.json",
		Edit: &Edit{
			File: "service.go",
			Old:  "\tif err := writeExitFile(p.bundle, e); err != nil {\n",
			New:  "\tif err := error(nil); err != nil { // was: writeExitFile(p.bundle, e)\n",
		},
		Check: "TestExitWhileNobodyListens",
		Hint: "Wait, State and the queued TaskExit still carry the exit. Predict what the delete action " +
			"reports for this task if the shim is killed after the container exited and before anyone " +
			"collected the exit. containerd v2.4.2's runc shim writes exit.json for this very case; " +
			"containerd 1.x's reports 137.",
		Anchor: "exercise-061-an-exit-that-dies-with-its-shim",
	},
	{
		// README heading: "### Exercise 06.2: what the delete action reports"
		ID:    "06.2",
		Step:  "06-reconnect",
		Kind:  Build,
		Title: "write recoverExit: the exit a dead shim's delete action reports",
		Funcs: []string{"recoverExit"},
		Check: "TestDeadShimIsCleanedUp",
		Hint: "Read exit.json from the bundle and return it when it decodes and names a pid. Otherwise " +
			"the container was killed by runc delete --force a moment ago: the pid from init.pid, " +
			"status 128+SIGKILL, and the current time.",
		Anchor: "exercise-062-what-the-delete-action-reports",
	},
	{
		// README heading: "### Exercise 06.3: give up on containerd"
		ID:    "06.3",
		Step:  "06-reconnect",
		Kind:  Break,
		Title: "forward each event once, and drop it if that fails",
		Edit: &Edit{
			File: "events.go",
			Old:  "\t\tfor attempt := 1; ; attempt++ {\n",
			New:  "\t\tfor attempt := 1; attempt <= 1; attempt++ { // give up after one attempt\n",
		},
		Check: "TestExitWhileNobodyListens",
		Hint: "Nobody listens at TTRPC_ADDRESS while the container runs and exits. Predict which events " +
			"reach the driver that comes back, and what would change with step 05's five attempts.",
		Anchor: "exercise-063-give-up-on-containerd",
	},
	{
		// docs/containerd-side.md heading: "### Exercise 06.4: write the reconnect"
		ID:    "06.4",
		Step:  "06-reconnect",
		Kind:  Build,
		Title: "write the driver's reconnect: find every shim again after a restart, or clean up after it",
		Lib:   "final/driver",
		Funcs: []string{"Driver.Reconnect", "Driver.reconnect", "isGone"},
		Check: "TestDeadShimIsCleanedUp",
		Hint: "Reconnect lists the bundles (d.Tasks) and calls reconnect on each, joining the errors. " +
			"reconnect dials the address in bootstrap.json (d.Connect); a shim that answers is asked " +
			"Connect and State (NotFound means a shim without a task). When nobody answers (isGone: " +
			"no file, no socket, connection refused), run the shim's delete action (d.DeleteShim), " +
			"remove the bundle and report the exit it returned as DELETED.",
		Anchor: "exercise-064-write-the-reconnect",
		Page:   "docs/containerd-side.md",
	},
	{
		// docs/07-final.md heading: "### Exercise 07.1: let the init's exit overtake its execs'"
		ID:    "07.1",
		Step:  "07-final",
		Kind:  Break,
		Title: "publish the init's TaskExit at once, even while execs still run",
		Lib:   "final/shim/task",
		Tests: "final/shim/shimtest",
		Edit: &Edit{
			File: "exits.go",
			Old: "\tfor _, e := range c.execs {\n" +
				"\t\t_ = e.Kill(context.Background(), 9) // refused for an exec that is not running\n" +
				"\t}\n" +
				"}\n\n" +
				"// finishInit sends the init's TaskExit once nothing holds it any more. Call with mu held.\n" +
				"func (s *Service) finishInit(c *container) {\n" +
				"\tif c.initExit == nil || c.exitSent || c.killing || c.runningExecs > 0 {\n",
			New: "}\n\n" +
				"// finishInit sends the init's TaskExit once nothing holds it any more. Call with mu held.\n" +
				"func (s *Service) finishInit(c *container) {\n" +
				"\tif c.initExit == nil || c.exitSent || c.killing { // was: ... || c.runningExecs > 0\n",
		},
		Check: "TestExecExitComesFirstWithoutPIDNamespace",
		Hint: "The container has no PID namespace of its own, so the exec outlives the init. Predict " +
			"the order of the two TaskExit events, what containerd does with the exec once it has the " +
			"init's, and why TestExecExitsComeBeforeInitExit, with a PID namespace, may still pass.",
		Anchor: "exercise-071-let-the-inits-exit-overtake-its-execs",
		Page:   "docs/07-final.md",
	},
	{
		// docs/07-final.md heading: "### Exercise 07.2: kill what the init leaves"
		ID:    "07.2",
		Step:  "07-final",
		Kind:  Build,
		Title: "write the kill of what an init without its own PID namespace leaves behind",
		Lib:   "final/shim/process",
		Tests: "final/shim/shimtest",
		Funcs: []string{"KillAllOnExit", "Init.KillAll"},
		Check: "TestKilledInitTakesItsChildren",
		Hint: "KillAllOnExit reads the linux.namespaces of config.json in the bundle (bundle.ReadSpec) and " +
			"answers false only for a pid namespace entry without a path; an unreadable spec gets the " +
			"kill. KillAll is p.runtime.Kill with SIGKILL and runc.KillOpts{All: true}, its error " +
			"wrapped through p.killError with the mark logEnd(p.runtime.Log) took before the call.",
		Anchor: "exercise-072-kill-what-the-init-leaves",
		Page:   "docs/07-final.md",
	},
	{
		// docs/07-final.md heading: "### Exercise 07.3: one shim per container, whatever the pod"
		ID:    "07.3",
		Step:  "07-final",
		Kind:  Break,
		Title: "ignore the group annotation: every container gets a shim of its own",
		Lib:   "final/shim/bootstrap",
		Tests: "final/shim/shimtest",
		Edit: &Edit{
			File: "start.go",
			Old:  "\t\t\treturn g, nil\n",
			New:  "\t\t\treturn f.id, nil // was: return g, nil\n",
		},
		Check: "TestGroupSharesOneShim",
		Hint: "Both containers carry the same group annotation. Predict the addresses the two start " +
			"actions print, how many shims run, and what the first Shutdown now does.",
		Anchor: "exercise-073-one-shim-per-container-whatever-the-pod",
		Page:   "docs/07-final.md",
	},
	{
		// docs/07-final.md heading: "### Exercise 07.4: resize the terminal"
		ID:    "07.4",
		Step:  "07-final",
		Kind:  Build,
		Title: "write the process side of ResizePty: set the terminal's size, refuse an exited exec",
		Lib:   "final/shim/process",
		Tests: "final/shim/shimtest",
		Funcs: []string{"base.Resize", "Exec.Resize"},
		Check: "TestResizePtyReachesTheTerminal",
		Hint: "base.Resize hands the size to the process's console (p.console, a *stdio.Console), and a " +
			"process without a terminal has nothing to resize, which is no error. Exec.Resize refuses " +
			"an exec that has stopped (e.check(opResize), which asks the state table) before it does the same.",
		Anchor: "exercise-074-resize-the-terminal",
		Page:   "docs/07-final.md",
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
