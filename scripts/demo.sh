#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The narrated walkthrough behind `make demo`: drives the newest shim in bin/ with shimctl and
# shows what happens, as far as that shim goes, and ends with `shimctl demo`, which narrates one
# container's life cycle from inside the driver and draws it as a Mermaid sequence diagram.
# Run as root from the repo root after `make build`.
# DEMO_SHIM=bin/containerd-shim-step03-v2 picks another shim. Everything lives in a private state
# directory that is removed at the end, and a demo that fails half-way leaves nothing running.
set -euo pipefail

say() { printf '\n==> %s\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root: containers need it"
[[ -x bin/shimctl ]] || die "bin/shimctl is missing: run make build first"

# The newest shim: the final one when it has been built, else the highest step.
shim=${DEMO_SHIM:-}
if [[ -z $shim ]]; then
	if [[ -x bin/containerd-shim-shimwalk-v2 ]]; then
		shim=bin/containerd-shim-shimwalk-v2
	else
		shim=$(find bin -maxdepth 1 -name 'containerd-shim-step[0-9][0-9]-v2' | sort | tail -n 1)
	fi
fi
[[ -n $shim && -x $shim ]] || die "no shim in bin/: run make build first"
# What the shim can do follows from its step; the final shim does everything.
if [[ $(basename "$shim") =~ ^containerd-shim-step([0-9][0-9])-v2$ ]]; then
	step=$((10#${BASH_REMATCH[1]}))
else
	step=99
fi

demo=$(mktemp -d /tmp/shimwalk-demo.XXXXXX)
state=$demo/state
export SHIMWALK_SOCKET_DIR=$demo/sockets SHIMWALK_RUNC_ROOT=$demo/runc
events_pid=

shimctl() { bin/shimctl --state "$state" --shim "$shim" "$@"; }
# show prints a command as the reader would type it, then runs it.
show() {
	local line="\$" a
	for a in "$@"; do
		if [[ $a =~ [^A-Za-z0-9_./:=+,-] ]]; then line+=" '$a'"; else line+=" $a"; fi
	done
	echo "$line"
	"$@"
}

cleanup() {
	local rc=$?
	set +e
	[[ -z $events_pid ]] || stop_events
	for bundle in "$state"/default/*/; do
		[[ -d $bundle ]] || continue
		id=$(basename "$bundle")
		shimctl task kill -s KILL --all "$id" >/dev/null 2>&1
		for _ in $(seq 50); do
			shimctl task delete "$id" >/dev/null 2>&1 && break
			[[ -d $bundle ]] || break
			sleep 0.1
		done
		# A shim that does not answer (step 01, or a dead one): its delete action still works.
		[[ -d $bundle ]] && shimctl shim delete "$id" >/dev/null 2>&1
	done
	# Containers that outlived their shim (steps before 04 cannot always stop them).
	for id in $(runc --root "$SHIMWALK_RUNC_ROOT/default" list -q 2>/dev/null); do
		runc --root "$SHIMWALK_RUNC_ROOT/default" delete -f "$id" >/dev/null 2>&1
	done
	if grep -q " $demo" /proc/self/mountinfo; then
		echo "demo: mounts left under $demo; not removing it" >&2
	else
		rm -rf "$demo"
	fi
	((rc == 0)) || echo "demo: failed (exit $rc); cleaned up" >&2
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop_events ends the background shimctl events: SIGTERM, then SIGKILL if it lingers, so that
# the demo never hangs on it.
stop_events() {
	kill -TERM "$events_pid" 2>/dev/null || true
	for _ in $(seq 50); do
		kill -0 "$events_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$events_pid" 2>/dev/null || true
	wait "$events_pid" 2>/dev/null || true
	events_pid=
}

# wait_stopped polls task state until the task is STOPPED (for shims before step 05: no Wait).
wait_stopped() {
	for _ in $(seq 100); do
		shimctl task state "$1" | grep -q " STOPPED " && return 0
		sleep 0.1
	done
	die "task $1 did not stop"
}

# wait_for polls a command for up to 10 seconds and ends the demo, naming what never happened,
# if it never succeeds: the demo waits for conditions, never for a fixed time.
wait_for() {
	local what=$1
	shift
	for _ in $(seq 100); do
		"$@" && return 0
		sleep 0.1
	done
	die "$what"
}

# running reports whether process $1 exists and has not exited: an exited shim stays a zombie
# until whatever adopted it reaps it, which is not always soon.
running() {
	local stat
	stat=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $stat != Z* ]]
}
exited() { ! running "$1"; }

# start_events runs shimctl events in the background, its output in $1 and its notes in $1.err,
# and returns once it serves. Not through the shimctl function: $! must be shimctl itself, not a
# subshell, which would not pass signals on. Its note is what shows that it listens: a socket
# file may be the stale one of an events that was killed.
start_events() {
	bin/shimctl --state "$state" events >"$1" 2>"$1.err" &
	events_pid=$!
	for _ in $(seq 100); do
		grep -q "serving events at" "$1.err" && return 0
		kill -0 "$events_pid" 2>/dev/null || break # it ended: its stderr says why
		sleep 0.1
	done
	die "shimctl events did not start: $(cat "$1.err")"
}

say "Shim: $shim (step $step); private state in $demo"
echo "    below, shimctl stands for: bin/shimctl --state $state --shim $shim"

say "The start action: the shim binary opens a socket, re-executes itself to serve it, prints the address and exits"
show shimctl shim start hello
address=$(sed -n 's/.*"address":"unix:\/\/\([^"]*\)".*/\1/p' "$state/default/hello/bootstrap.json")
shim_pid=$(cat "$state/default/hello/shim.pid")
say "The socket is 0600 in a 0700 directory: only root may talk to the shim"
show ls -ld "$(dirname "$address")"
show ls -l "$address"
say "The long-lived shim: its parent is not shimctl, and it leads a process group of its own"
show ps -o pid,ppid,pgid,sid,cmd -p "$$" -p "$shim_pid"

if ((step >= 2)); then
	say "A ttrpc round trip: the Connect RPC of the Task service"
	show shimctl task connect hello
	# The final shim's delete action leaves a live shim alone (several containers may share
	# it): as containerd does, Shutdown ends the shim, and delete cleans up after it.
	say "The Shutdown RPC ends the shim; its delete action then cleans up after it"
	show shimctl shim shutdown hello
	wait_for "the shim $shim_pid did not exit after Shutdown" exited "$shim_pid"
else
	say "The delete action stops the shim and cleans up after it"
fi
show shimctl shim delete hello

if ((step < 3)); then
	say "This shim cannot run containers yet (Create arrives in step 03). Done."
	exit 0
fi

say "A container in the foreground: create, start, wait; shimctl exits with the container's status"
((step >= 5)) || echo "    (this shim has no Wait yet: shimctl reads the output to its end, then polls State)"
rc=0
show shimctl run --rm demo -- sh -c 'echo hello from a container; exit 3' || rc=$?
echo "shimctl exited with $rc"
((step >= 4)) || echo "    (step 03 cannot collect the exit: the container is not its child, hence 255, unknown)"

say "A detached container, and whose child it is"
show shimctl run -d sleeper -- sleep 1000
pid=$(shimctl task state sleeper | sed -n 's/.* pid \([0-9]*\) .*/\1/p')
show shimctl tree sleeper
parent=$(ps -o ppid= -p "$pid" | tr -d ' ')
sleeper_shim=$(cat "$state/default/sleeper/shim.pid")
if [[ $parent == "$sleeper_shim" ]]; then
	echo "    the container ($pid) is the shim's ($sleeper_shim) child: the shim is a subreaper and collects its exit"
else
	echo "    the container ($pid) is the child of $parent, not of the shim ($sleeper_shim): the shim cannot learn its exit status"
fi
show shimctl task kill -s KILL sleeper
if ((step >= 5)); then
	rc=0
	show shimctl task wait sleeper || rc=$?
else
	wait_stopped sleeper
	show shimctl task state sleeper
fi
show shimctl task delete sleeper

if ((step >= 5)); then
	say "Task events: shimctl events serves containerd's Events service, where the shim forwards them"
	start_events "$demo/events.out"
	rc=0
	show shimctl run --rm evented -- sh -c 'echo an evented container; exit 0' || rc=$?
	wait_for "the events of evented did not arrive" grep -q "/tasks/delete container=evented" "$demo/events.out"
	stop_events
	echo '$ shimctl events   # printed, while it ran:'
	cat "$demo/events.out"
fi

if ((step >= 6)); then
	say "The driver restarts in the middle of a running container; shimctl events plays the containerd that stays"
	start_events "$demo/events-before.out"
	echo '$ shimctl events &'
	# sh is PID 1 of the container: it ignores signals it has no handler for, and traps TERM.
	show shimctl run -d survivor -- sh -c 'trap "exit 5" TERM; while :; do sleep 0.1; done'
	survivor=$state/default/survivor
	survivor_pid=$(cat "$survivor/init.pid")
	# Once the first driver has the start event, only what happens from here on is queued.
	wait_for "the first events did not get the start of survivor" grep -q "/tasks/start container=survivor" "$demo/events-before.out"

	say "SIGKILL the driver (shimctl events, pid $events_pid), as when containerd crashes: from now on no driver runs"
	show kill -KILL "$events_pid"
	wait "$events_pid" 2>/dev/null || true
	events_pid=
	say "The container does not notice: it still runs, and it is still the shim's child"
	show shimctl tree survivor

	say "The container exits while no driver runs: the shim writes exit.json into the bundle and keeps the TaskExit event"
	show kill -TERM "$survivor_pid"
	wait_for "survivor's exit was not recorded in exit.json" test -s "$survivor/exit.json"
	show cat "$survivor/exit.json"
	echo

	say "A driver comes back: the shim forwards the exit it kept, and ls reconnects to the shim through bootstrap.json"
	start_events "$demo/events-after.out"
	wait_for "the queued exit of survivor did not arrive" grep -q "/tasks/exit container=survivor" "$demo/events-after.out"
	# Shims of the containers above may still be forwarding their last events (they try for a
	# few seconds after Shutdown): only survivor's belong to this story.
	echo '$ shimctl events &   # has printed, about survivor:'
	grep "container=survivor" "$demo/events-after.out"
	show shimctl ls
	show shimctl task delete survivor
	stop_events
fi

say "One container's whole life cycle again, narrated by shimctl demo, with the trace as a sequence diagram"
show bin/shimctl --shim "$shim" demo

say "Done: every shim and container is gone, and $demo is removed"
